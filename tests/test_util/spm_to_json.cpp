// SentencePiece BPE .model -> vocabulary, merges (as HF's SentencePieceExtractor derives
// them) and a tokenizer.json.
#include "test_util/spm_to_json.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace prism::test {
namespace {

using json = nlohmann::json;

// Byte offsets of the character boundaries inside s (excluding 0 and s.size()).
std::vector<size_t> char_boundaries(const std::string& s) {
  std::vector<size_t> b;
  for (size_t i = 1; i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) b.push_back(i);
  return b;
}

json added_token(int id, const std::string& content) {
  return {{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", true}};
}

// Feeds a vector of sentences to the trainer.
class VectorIterator : public sentencepiece::SentenceIterator {
 public:
  explicit VectorIterator(const std::vector<std::string>& v) : v_(v) {}
  bool done() const override { return i_ >= v_.size(); }
  void Next() override { ++i_; }
  const std::string& value() const override { return v_[i_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>& v_;
  size_t i_ = 0;
};

}  // namespace

Result<std::string> train_sentencepiece(const std::vector<std::string>& corpus, const std::string& args) {
  VectorIterator it(corpus);
  std::string proto;
  auto status = sentencepiece::SentencePieceTrainer::Train(args, &it, &proto);
  if (!status.ok()) return internal_error("SentencePiece training failed: " + status.ToString());
  return proto;
}

Result<SpmBpe> spm_bpe_vocab_and_merges(const std::string& model_path) {
  sentencepiece::SentencePieceProcessor sp;
  if (!sp.Load(model_path).ok()) return not_found("cannot load " + model_path);
  const int n = sp.GetPieceSize();
  SpmBpe out;
  std::unordered_map<std::string, int> ids;
  for (int i = 0; i < n; ++i) {
    out.vocab.emplace_back(sp.IdToPiece(i), i);
    ids[sp.IdToPiece(i)] = i;
  }
  struct Merge {
    std::string l, r;
    float score;
  };
  std::vector<Merge> merges;
  for (int i = 0; i < n; ++i) {
    const std::string& piece = sp.IdToPiece(i);
    std::vector<Merge> local;
    for (size_t cut : char_boundaries(piece)) {
      std::string l = piece.substr(0, cut), r = piece.substr(cut);
      if (ids.count(l) && ids.count(r)) local.push_back({l, r, sp.GetScore(i)});
    }
    std::sort(local.begin(), local.end(),
              [&](const Merge& a, const Merge& b) { return std::pair(ids[a.l], ids[a.r]) < std::pair(ids[b.l], ids[b.r]); });
    merges.insert(merges.end(), local.begin(), local.end());
  }
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) { return a.score > b.score; });
  for (Merge& m : merges) out.merges.emplace_back(std::move(m.l), std::move(m.r));
  out.unk_token = sp.IdToPiece(sp.unk_id());
  return out;
}

Result<std::string> spm_to_tokenizer_json(const std::string& model_path, SpmJsonLayout layout) {
  PRISM_ASSIGN_OR_RETURN(SpmBpe bpe, spm_bpe_vocab_and_merges(model_path));
  json vocab = json::object();
  for (const auto& [piece, id] : bpe.vocab) vocab[piece] = id;
  json merge_list = json::array();
  for (const auto& [l, r] : bpe.merges) merge_list.push_back(json::array({l, r}));

  const std::string space = "\xE2\x96\x81";
  json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = json::array({added_token(0, "<unk>"), added_token(1, "<s>"), added_token(2, "</s>")});
  json decoders = json::array();
  if (layout == SpmJsonLayout::prepend_replace) {
    j["normalizer"] = {{"type", "Sequence"},
                       {"normalizers", json::array({{{"type", "Prepend"}, {"prepend", space}},
                                                    {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", space}}})}};
    j["pre_tokenizer"] = nullptr;
    decoders.push_back({{"type", "Replace"}, {"pattern", {{"String", space}}}, {"content", " "}});
    decoders.push_back({{"type", "ByteFallback"}});
    decoders.push_back({{"type", "Fuse"}});
    decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  } else {
    j["normalizer"] = nullptr;
    j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", space}, {"prepend_scheme", "first"}, {"split", false}};
    decoders.push_back({{"type", "Metaspace"}, {"replacement", space}, {"prepend_scheme", "first"}, {"split", false}});
    decoders.push_back({{"type", "ByteFallback"}});
    decoders.push_back({{"type", "Fuse"}});
  }
  j["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
      {"pair", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                            {{"SpecialToken", {{"id", "<s>"}, {"type_id", 1}}}}, {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", json::array({1})}, {"tokens", json::array({"<s>"})}}}}}};
  j["model"] = {{"type", "BPE"},          {"dropout", nullptr},        {"unk_token", "<unk>"},
                {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr}, {"fuse_unk", true},
                {"byte_fallback", true},  {"vocab", vocab},            {"merges", merge_list}};
  return j.dump();
}

}  // namespace prism::test
