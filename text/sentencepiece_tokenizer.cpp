// A SentencePiece .model as a TokenizerBackend, through Debian's libsentencepiece: the model's
// own normalizer and algorithm (BPE or Unigram), byte fallback included. Special tokens follow
// the HF slow tokenizers: <s> before each text when the model has a BOS (Llama), else </s>
// after each (T5).
#include <sentencepiece_processor.h>

#include "text/tokenizer_backend.h"

namespace prism::text {
namespace {

class SentencePieceBackend : public TokenizerBackend {
 public:
  explicit SentencePieceBackend(std::unique_ptr<sentencepiece::SentencePieceProcessor> sp) : sp_(std::move(sp)) {}

  void encode(std::string_view text, std::vector<TokenId>& ids) const override {
    std::vector<int> out;
    // Encode fails only without a loaded model, which load() rules out.
    sp_->Encode(absl::string_view(text.data(), text.size()), &out).IgnoreError();
    ids.insert(ids.end(), out.begin(), out.end());
  }

  size_t num_special_tokens(bool pair) const override {
    return (sp_->bos_id() >= 0 || sp_->eos_id() >= 0) ? (pair ? 2 : 1) : 0;
  }

  void post_process(std::vector<Encoding>& encodings, bool add_special_tokens) const override {
    const bool bos = sp_->bos_id() >= 0;
    const TokenId special = bos ? sp_->bos_id() : sp_->eos_id();
    Encoding out;
    for (size_t i = 0; i < encodings.size(); ++i) {
      const bool add = add_special_tokens && special >= 0;
      if (add && bos) out.push_back(special, static_cast<int32_t>(i), true);
      Encoding part = encodings[i];
      part.set_type_id(static_cast<int32_t>(i));
      out.append(part);
      if (add && !bos) out.push_back(special, static_cast<int32_t>(i), true);
    }
    encodings.assign(1, std::move(out));
  }

  Result<std::string> decode(std::span<const TokenId> ids, bool skip_special_tokens) const override {
    // Runs of ordinary ids go to SentencePiece; control pieces (<s>, </s>), which it would drop,
    // are kept as text unless skipped, as HF's slow tokenizers do.
    std::string out;
    std::vector<int> run;
    auto flush = [&] {
      if (run.empty()) return;
      std::string text;
      sp_->Decode(run, &text).IgnoreError();
      out += text;
      run.clear();
    };
    for (TokenId id : ids) {
      if (id < 0 || id >= sp_->GetPieceSize())
        return out_of_range("token id " + std::to_string(id) + " is not in the vocabulary");
      if (sp_->IsControl(id)) {
        flush();
        if (!skip_special_tokens) out += sp_->IdToPiece(id);
      } else {
        run.push_back(id);
      }
    }
    flush();
    return out;
  }

  std::optional<TokenId> token_to_id(std::string_view token) const override {
    const int id = sp_->PieceToId(absl::string_view(token.data(), token.size()));
    if (id < 0 || (id == sp_->unk_id() && sp_->IdToPiece(id) != token)) return std::nullopt;
    return id;
  }

  std::string id_to_token(TokenId id) const override {
    if (id < 0 || id >= sp_->GetPieceSize()) return {};
    return sp_->IdToPiece(id);
  }

  int32_t vocab_size() const override { return sp_->GetPieceSize(); }
  bool is_special(TokenId id) const override { return id >= 0 && id < sp_->GetPieceSize() && sp_->IsControl(id); }

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;  // const after load
};

}  // namespace

Result<LoadedTokenizer> load_sentencepiece(const std::string& model_path) {
  auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto status = sp->Load(model_path);
  if (!status.ok()) return data_loss("SentencePiece model '" + model_path + "': " + status.ToString());
  LoadedTokenizer out;
  out.backend = std::make_unique<SentencePieceBackend>(std::move(sp));
  return out;
}

}  // namespace prism::text
