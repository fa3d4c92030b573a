// Unigram (SentencePiece unigram: T5, ALBERT, XLM-R, ...): the segmentation of a piece into
// vocabulary pieces with the highest total log-probability (Viterbi), reproducing HF
// tokenizers' encode_optimized: every vocabulary string is matchable (control and byte
// pieces included), a character no piece starts with costs min_score - 10 as unk, and
// consecutive unks fuse into one. It sees one pre-tokenized piece; it must not normalise.
#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "text/models/model_common.h"
#include "text/token_model.h"

namespace prism::text {
namespace {

using models::StringIdMap;
using models::U64Map;

constexpr double kUnkPenalty = 10.0;  // HF's K_UNK_PENALTY, as SentencePiece's kUnkPenalty

// Viterbi lattice node for the best path ending at a byte offset.
struct Node {
  double score;
  int32_t start;  // byte offset the last piece starts at; -1 while unreached
  TokenId id;     // that piece's id; unk_id (or -1 without one) for an unknown character
};

class Unigram final : public models::VocabularyModel {
 public:
  Unigram(UnigramConfig config, StringIdMap vocab, std::vector<std::string> by_id, std::vector<double> scores)
      : VocabularyModel(std::move(vocab), std::move(by_id)),
        config_(std::move(config)),
        scores_(std::move(scores)) {
    byte_ids_ = models::byte_fallback_ids(vocab_);
    build_trie();
  }

  void tokenize(std::string_view piece, std::vector<TokenId>& out) const override;


 private:
  // NOTE: a byte trie; edges live in one hash map keyed node << 8 | byte, so a step is one
  // probe and the walk stops at the first missing edge (prefix search in O(match length)).
  void build_trie() {
    terminal_.assign(1, -1);
    edges_.reserve(by_id_.size() * 4);
    min_score_ = INFINITY;
    for (TokenId id = 0; id < static_cast<TokenId>(by_id_.size()); ++id) {
      const std::string& token = by_id_[id];
      min_score_ = std::min(min_score_, scores_[id]);
      uint64_t node = 0;
      for (unsigned char b : token) {
        uint64_t key = (node << 8) | b;
        if (const uint64_t* child = edges_.find(key)) {
          node = *child;
        } else {
          edges_.put(key, terminal_.size());
          node = terminal_.size();
          terminal_.push_back(-1);
        }
      }
      if (!token.empty()) terminal_[node] = id;
    }
  }
  void emit(std::string_view piece, int32_t start, int32_t end, TokenId node_id, bool unk,
            std::vector<TokenId>& out) const;

  UnigramConfig config_;  // vocab moved out into the tables
  std::vector<double> scores_;     // [vocab] log-probability by id
  U64Map edges_;                  // node << 8 | byte -> child node
  std::vector<TokenId> terminal_;  // [nodes] id of the piece ending at the node, -1 if none
  std::array<TokenId, 256> byte_ids_;
  double min_score_ = 0;
};

// One output group [start, end): a vocabulary piece (node_id) or a run of fused unknowns,
// which HF resolves through the vocabulary string, then byte fallback, then unk.
void Unigram::emit(std::string_view piece, int32_t start, int32_t end, TokenId node_id, bool unk,
                   std::vector<TokenId>& out) const {
  if (!unk) {
    out.push_back(node_id);
    return;
  }
  std::string_view s = piece.substr(start, end - start);
  if (std::optional<TokenId> id = models::find_id(vocab_, s)) {
    out.push_back(*id);
    return;
  }
  if (config_.byte_fallback && models::append_byte_fallback(byte_ids_, s, out)) return;
  if (config_.unk_id) out.push_back(*config_.unk_id);
}

void Unigram::tokenize(std::string_view piece, std::vector<TokenId>& out) const {
  if (piece.empty()) return;
  const auto size = static_cast<int32_t>(piece.size());
  const double unk_score = min_score_ - kUnkPenalty;
  const TokenId unk_id = config_.unk_id.value_or(-1);
  thread_local std::vector<Node> best;
  best.assign(size + 1, Node{0.0, -1, -1});
  best[0].start = 0;
  for (int32_t start = 0; start < size;) {
    const double here = best[start].score;
    const auto char_len = std::min<int32_t>(utf8_sequence_length(static_cast<unsigned char>(piece[start])), size - start);
    bool has_single_char = false;
    uint64_t node = 0;
    for (int32_t end = start; end < size; ++end) {
      const uint64_t* child = edges_.find((node << 8) | static_cast<unsigned char>(piece[end]));
      if (!child) break;
      node = *child;
      TokenId id = terminal_[node];
      if (id < 0) continue;
      Node& target = best[end + 1];
      double candidate = here + scores_[id];
      if (target.start < 0 || candidate > target.score) target = {candidate, start, id};
      if (end + 1 - start == char_len) has_single_char = true;
    }
    if (!has_single_char) {
      Node& target = best[start + char_len];
      double candidate = here + unk_score;
      if (target.start < 0 || candidate > target.score) target = {candidate, start, unk_id};
    }
    start += char_len;
  }
  // Walk back; groups come out last-first, so collect [start, end, id] then emit in order.
  // A node is "unknown" when its id is unk_id: like HF, a literal "<unk>" piece fuses too.
  thread_local std::vector<Node> path;  // score unused; start = group start, id = node id
  thread_local std::vector<int32_t> ends;
  path.clear();
  ends.clear();
  int32_t end = size;
  while (end > 0) {
    const Node& n = best[end];
    if (n.id == unk_id && !path.empty() && path.back().id == unk_id) {
      path.back().start = n.start;  // fuse with the unknown group to its right
    } else {
      path.push_back({0.0, n.start, n.id});
      ends.push_back(end);
    }
    end = n.start;
  }
  for (size_t i = path.size(); i-- > 0;) emit(piece, path[i].start, ends[i], path[i].id, path[i].id == unk_id, out);
}

}  // namespace

Result<std::unique_ptr<TokenModel>> make_unigram(UnigramConfig config) {
  if (config.vocab.empty()) return invalid_argument("unigram: empty vocabulary");
  if (config.unk_id && (*config.unk_id < 0 || static_cast<size_t>(*config.unk_id) >= config.vocab.size()))
    return invalid_argument("unigram: unk_id " + std::to_string(*config.unk_id) + " is outside the vocabulary");
  std::vector<std::pair<std::string, TokenId>> ids;
  std::vector<double> scores;
  ids.reserve(config.vocab.size());
  scores.reserve(config.vocab.size());
  for (size_t i = 0; i < config.vocab.size(); ++i) {
    if (config.vocab[i].first.empty()) return invalid_argument("unigram: empty piece at id " + std::to_string(i));
    if (!std::isfinite(config.vocab[i].second))
      return invalid_argument("unigram: non-finite score for piece '" + config.vocab[i].first + "'");
    ids.emplace_back(std::move(config.vocab[i].first), static_cast<TokenId>(i));
    scores.push_back(config.vocab[i].second);
  }
  config.vocab.clear();
  config.vocab.shrink_to_fit();
  StringIdMap vocab;
  std::vector<std::string> by_id;
  PRISM_RETURN_IF_ERROR(models::build_vocab(ids, vocab, by_id));
  return std::unique_ptr<TokenModel>(
      std::make_unique<Unigram>(std::move(config), std::move(vocab), std::move(by_id), std::move(scores)));
}

}  // namespace prism::text
