// tools/demo/demo_chat.cpp: writing the demo chat model. Weights come from std::mt19937 mapped to
// uniform floats by hand (std's distributions differ between standard libraries), so the
// checkpoint is the same everywhere.
//
// NOTE: random weights babble; three choices make the babble readable and long:
// - Embedding dimension kReadable (0) carries a per-token "readability" value, always > 0:
//   small for special tokens and unprintable bytes, larger for printable pieces, largest for
//   whole words. The tied LM head turns it into a logit offset proportional to
//   norm.weight[kReadable] * x[kReadable], and x[kReadable] is the last input token's value
//   (no layer writes that dimension: its rows of o_proj and down_proj are zero, and the layer
//   norms give it weight 0 so it does not swamp attention and MLP inputs). Since every token's
//   value is positive, the offset always favours words, whatever the prompt ends with.
// - The other rows of unprintable bytes and special tokens have tiny norms, so their logits
//   sit near 0 while printable pieces spread around it.
// - The final norm's other weights have random signs, which breaks the tied head's pull
//   toward repeating its input token (e·e > 0 for any row e); their size sets how spread the
//   word logits are, so that sampling at temperature 1 varies without turning into noise.
// <|im_end|>'s readability is tuned (see kImEndReadability): greedy replies run to
// max_tokens, sampled ones end now and then.
#include "tools/demo/demo_chat.h"

#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/file.h"
#include "formats/safetensors.h"
#include "runtime/tensor.h"
#include "text/pre_tokenizers.h"

namespace prism::tools::demo {

namespace fs = std::filesystem;

using ordered_json = nlohmann::ordered_json;

namespace {

// Shape of the demo decoder: a SmolLM2-like Llama, much smaller.
constexpr int64_t kHidden = 64;
constexpr int64_t kLayers = 2;
constexpr int64_t kHeads = 4;
constexpr int64_t kKvHeads = 2;
constexpr int64_t kHeadDim = kHidden / kHeads;
constexpr int64_t kIntermediate = 128;
constexpr int64_t kMaxPositions = 2048;
constexpr double kRopeTheta = 10000.0;
constexpr double kRmsNormEps = 1e-5;
constexpr uint32_t kSeed = 20240601;

// Special tokens first, as SmolLM2 numbers them: ids 0, 1, 2.
constexpr const char* kEndOfText = "<|endoftext|>";
constexpr const char* kImStart = "<|im_start|>";
constexpr const char* kImEnd = "<|im_end|>";
constexpr const char* kSpecials[] = {kEndOfText, kImStart, kImEnd};
constexpr int32_t kImEndId = 2;
constexpr int32_t kEndOfTextId = 0;

// Common English words: each becomes one token (" word", with its leading space) through a
// chain of merges, so the babble reads as words.
constexpr std::string_view kWords = R"(
the of and to in is was for that on as with by he at from it his an were are which this be
or has had not but first one their its new after who they have her she two been other when
there all into time may more most only over some world would where up such used many can
about out known then made also team three well so between any both how him what year could
around each while through before under high part number since life work people just like
back even still way take get make go see know think come look want give use find tell ask
feel try call good great little own old right big long small large next early young
important few same able last different home water room story book word house friend hour
line end name idea body nothing together follow open walk remember love build stay reach
city river light voice music garden morning night day sun moon sky tree road window door
table paper letter school answer question problem system program model data text token
very really always never often here now today soon again above below near far inside
because although if than these those we you they them our your my me us i
)";

// Sentence starts without a leading space and common endings.
constexpr const char* kPieces[] = {"The", "It", "In", "We", "You", "This", "ing", "ed", "er", "ly", "tion", "s"};

enum class TokenKind { special, unprintable, piece, word };

// The readability value (embedding dimension kReadable) of each kind. NOTE: all > 0 (see top).
float readability(TokenKind kind) {
  switch (kind) {
    case TokenKind::special: return 0.3f;
    case TokenKind::unprintable: return 0.6f;
    case TokenKind::piece: return 1.0f;
    case TokenKind::word: return 2.0f;
  }
  return 0.0f;
}
// Above every word, so it can win when a context has lifted the other logits little: tuned on
// the checkpoint so that sampling at temperature 1 ends a reply after ~500 tokens on average
// (p ~ 0.002 per step) while greedy never picks it (p <= 0.01 over the prompts tried). At 2.5
// greedy replies end within a few dozen tokens: the margin is narrow, keep the value.
constexpr float kImEndReadability = 2.2f;
constexpr int64_t kReadable = 0;            // the embedding dimension carrying readability
constexpr float kFinalNormReadable = 6.0f;  // model.norm.weight[kReadable]
constexpr float kFinalNormOther = 0.6f;     // |model.norm.weight| elsewhere: the spread of word logits

struct Vocabulary {
  std::vector<std::string> tokens;  // in id order, byte-level alphabet (space is "Ġ")
  std::vector<TokenKind> kinds;
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  // Added special tokens past the BPE vocabulary (demos built on this one): ids from
  // tokens.size() on, in order; embedded as special tokens.
  std::vector<std::string> added;

  int64_t size() const { return static_cast<int64_t>(tokens.size() + added.size()); }
  TokenKind kind(int64_t id) const { return id < static_cast<int64_t>(kinds.size()) ? kinds[id] : TokenKind::special; }
};

// The vocabulary: specials, the 256 byte tokens, then one merge per new prefix of each word
// (" w", " wo", " wor", ...): a merge's parts are always earlier tokens, as BPE training makes.
Vocabulary demo_vocabulary() {
  Vocabulary v;
  std::set<std::string> seen;
  auto add = [&](const std::string& token, TokenKind kind) {
    if (!seen.insert(token).second) return false;
    v.tokens.push_back(token);
    v.kinds.push_back(kind);
    return true;
  };
  for (const char* s : kSpecials) add(s, TokenKind::special);
  const auto& alphabet = text::byte_to_unicode();
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x20 && b < 0x7f) || b == '\n';
    add(alphabet[b], printable ? TokenKind::piece : TokenKind::unprintable);
  }
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < v.tokens.size(); ++i) index[v.tokens[i]] = i;
  auto add_chain = [&](std::string_view text, TokenKind whole_kind) {
    std::string cur = alphabet[static_cast<unsigned char>(text[0])];
    for (size_t i = 1; i < text.size(); ++i) {
      const std::string& next = alphabet[static_cast<unsigned char>(text[i])];
      const std::string merged = cur + next;
      if (add(merged, TokenKind::piece)) {
        v.merges.emplace_back(cur, next);
        index[merged] = v.tokens.size() - 1;
      }
      cur = merged;
    }
    v.kinds[index.at(cur)] = whole_kind;
  };
  std::string word;
  for (char c : kWords) {
    if (c >= 'a' && c <= 'z') {
      word += c;
    } else if (!word.empty()) {
      add_chain(" " + word, TokenKind::word);
      word.clear();
    }
  }
  for (const char* p : kPieces) add_chain(p, TokenKind::piece);
  return v;
}

ordered_json special_token(const std::string& content, int id) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", true}};
}

// A Hugging Face tokenizer.json as GPT2TokenizerFast saves a byte-level BPE (SmolLM2's shape).
ordered_json tokenizer_json(const Vocabulary& v) {
  ordered_json vocab = ordered_json::object();
  for (size_t i = 0; i < v.tokens.size(); ++i) vocab[v.tokens[i]] = static_cast<int>(i);
  ordered_json merges = ordered_json::array();
  for (const auto& [a, b] : v.merges) merges.push_back(a + " " + b);
  ordered_json added = ordered_json::array();
  for (int i = 0; i < static_cast<int>(std::size(kSpecials)); ++i) added.push_back(special_token(kSpecials[i], i));
  for (size_t i = 0; i < v.added.size(); ++i)
    added.push_back(special_token(v.added[i], static_cast<int>(v.tokens.size() + i)));
  const ordered_json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer", byte_level},
          {"post_processor", byte_level},
          {"decoder", byte_level},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", ""},
            {"end_of_word_suffix", ""},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"vocab", vocab},
            {"merges", merges}}}};
}

// ChatML, as SmolLM2-Instruct writes it, without a default system prompt.
constexpr const char* kChatTemplate =
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

ordered_json tokenizer_config() {
  ordered_json decoder = ordered_json::object();
  for (int i = 0; i < static_cast<int>(std::size(kSpecials)); ++i) {
    ordered_json t = special_token(kSpecials[i], i);
    t.erase("id");
    decoder[std::to_string(i)] = t;
  }
  return {{"add_prefix_space", false},
          {"added_tokens_decoder", decoder},
          {"additional_special_tokens", {kImStart, kImEnd}},
          {"bos_token", nullptr},
          {"chat_template", kChatTemplate},
          {"clean_up_tokenization_spaces", false},
          {"eos_token", kImEnd},
          {"model_max_length", kMaxPositions},
          {"pad_token", kEndOfText},
          {"tokenizer_class", "GPT2Tokenizer"},
          {"unk_token", nullptr}};
}

ordered_json llama_config(int64_t vocab_size) {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"attention_bias", false},
          {"attention_dropout", 0.0},
          {"bos_token_id", nullptr},
          {"eos_token_id", kImEndId},
          {"head_dim", kHeadDim},
          {"hidden_act", "silu"},
          {"hidden_size", kHidden},
          {"initializer_range", 0.02},
          {"intermediate_size", kIntermediate},
          {"max_position_embeddings", kMaxPositions},
          {"mlp_bias", false},
          {"model_type", "llama"},
          {"num_attention_heads", kHeads},
          {"num_hidden_layers", kLayers},
          {"num_key_value_heads", kKvHeads},
          {"pad_token_id", kEndOfTextId},
          {"pretraining_tp", 1},
          {"rms_norm_eps", kRmsNormEps},
          {"rope_scaling", nullptr},
          {"rope_theta", kRopeTheta},
          {"tie_word_embeddings", true},
          {"torch_dtype", "float32"},
          {"transformers_version", "4.46.0"},
          {"use_cache", true},
          {"vocab_size", vocab_size}};
}

ordered_json generation_config() {
  return {{"_from_model_config", true},
          {"bos_token_id", nullptr},
          {"eos_token_id", kImEndId},
          {"pad_token_id", kEndOfTextId},
          {"transformers_version", "4.46.0"}};
}

// Random numbers from one seeded stream, in the order they are drawn.
class Random {
 public:
  explicit Random(uint32_t seed) : rng_(seed) {}
  float uniform() { return static_cast<float>(rng_() >> 8) * (1.0f / 16777216.0f); }  // [0, 1), 24 bits
  float symmetric(float scale) { return scale * (2.0f * uniform() - 1.0f); }            // (-scale, scale)

  // [rows, cols] f32, uniform with the standard deviation of 1/sqrt(cols) (fan-in scaling, so
  // activations keep their size through the layers).
  Tensor linear(int64_t rows, int64_t cols) {
    Tensor t = Tensor::empty({rows, cols}, DType::f32);
    const float scale = std::sqrt(3.0f / static_cast<float>(cols));
    float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = symmetric(scale);
    return t;
  }
  // [kHidden] f32 near 1, with weight 0 on kReadable (see top).
  Tensor layer_norm() {
    Tensor t = Tensor::empty({kHidden}, DType::f32);
    float* p = t.data<float>();
    for (int64_t i = 0; i < kHidden; ++i) p[i] = 1.0f + symmetric(0.1f);
    p[kReadable] = 0.0f;
    return t;
  }

 private:
  std::mt19937 rng_;
};

// [vocab, kHidden]: readability in dimension kReadable, the rest uniform; tiny for special
// tokens and unprintable bytes.
Tensor embedding(const Vocabulary& v, Random& r) {
  const int64_t vocab_size = v.size();
  Tensor t = Tensor::empty({vocab_size, kHidden}, DType::f32);
  float* p = t.data<float>();
  for (int64_t id = 0; id < vocab_size; ++id) {
    const TokenKind kind = v.kind(id);
    const bool printable = kind == TokenKind::piece || kind == TokenKind::word;
    float* row = p + id * kHidden;
    for (int64_t d = 0; d < kHidden; ++d) row[d] = r.symmetric(printable ? 1.0f : 0.02f);
    row[kReadable] = id == kImEndId ? kImEndReadability : readability(kind);
  }
  return t;
}

void zero_row(Tensor& w, int64_t row) {
  float* p = w.data<float>() + row * w.shape()[1];
  for (int64_t i = 0; i < w.shape()[1]; ++i) p[i] = 0.0f;
}

// LlamaForCausalLM's tensors under their Hugging Face names, "model." replaced by `prefix`
// (tied: no lm_head.weight).
std::vector<std::pair<std::string, Tensor>> llama_weights(const Vocabulary& v, const std::string& prefix) {
  Random r(kSeed);
  std::vector<std::pair<std::string, Tensor>> t;
  t.emplace_back(prefix + "embed_tokens.weight", embedding(v, r));
  for (int64_t l = 0; l < kLayers; ++l) {
    const std::string p = prefix + "layers." + std::to_string(l) + ".";
    t.emplace_back(p + "input_layernorm.weight", r.layer_norm());
    t.emplace_back(p + "self_attn.q_proj.weight", r.linear(kHeads * kHeadDim, kHidden));
    t.emplace_back(p + "self_attn.k_proj.weight", r.linear(kKvHeads * kHeadDim, kHidden));
    t.emplace_back(p + "self_attn.v_proj.weight", r.linear(kKvHeads * kHeadDim, kHidden));
    Tensor o_proj = r.linear(kHidden, kHeads * kHeadDim);
    zero_row(o_proj, kReadable);
    t.emplace_back(p + "self_attn.o_proj.weight", std::move(o_proj));
    t.emplace_back(p + "post_attention_layernorm.weight", r.layer_norm());
    t.emplace_back(p + "mlp.gate_proj.weight", r.linear(kIntermediate, kHidden));
    t.emplace_back(p + "mlp.up_proj.weight", r.linear(kIntermediate, kHidden));
    Tensor down_proj = r.linear(kHidden, kIntermediate);
    zero_row(down_proj, kReadable);
    t.emplace_back(p + "mlp.down_proj.weight", std::move(down_proj));
  }
  // Final norm: random signs (see top), kFinalNormReadable on kReadable.
  Tensor norm = Tensor::empty({kHidden}, DType::f32);
  float* n = norm.data<float>();
  for (int64_t i = 0; i < kHidden; ++i) n[i] = r.uniform() < 0.5f ? -kFinalNormOther : kFinalNormOther;
  n[kReadable] = kFinalNormReadable;
  t.emplace_back(prefix + "norm.weight", std::move(norm));
  return t;
}

Status write_json(const fs::path& path, const ordered_json& j) { return write_file(path.string(), j.dump(2) + "\n"); }

}  // namespace

DemoLanguageModel demo_language_model(const std::vector<std::string>& added_specials, const std::string& prefix) {
  Vocabulary v = demo_vocabulary();
  v.added = added_specials;
  DemoLanguageModel lm;
  lm.vocab_size = v.size();
  lm.tokenizer = tokenizer_json(v);
  lm.config = llama_config(lm.vocab_size);
  lm.weights = llama_weights(v, prefix);
  return lm;
}

Status write_demo_chat(const fs::path& dir) {
  const Vocabulary v = demo_vocabulary();
  const int64_t vocab_size = v.size();
  PRISM_RETURN_IF_ERROR(write_json(dir / "config.json", llama_config(vocab_size)));
  PRISM_RETURN_IF_ERROR(write_json(dir / "generation_config.json", generation_config()));
  PRISM_RETURN_IF_ERROR(
      formats::write_safetensors((dir / "model.safetensors").string(), llama_weights(v, "model."), {{"format", "pt"}}));
  PRISM_RETURN_IF_ERROR(write_json(dir / "tokenizer.json", tokenizer_json(v)));
  PRISM_RETURN_IF_ERROR(write_json(dir / "tokenizer_config.json", tokenizer_config()));
  return write_file((dir / "README.txt").string(),
                    "Prism demo deployment 'demo-chat': a tiny Llama (hidden 64, 2 layers, 4 heads, 2 KV heads,\n"
                    "tied embeddings) with random weights, a byte-level BPE tokenizer over a few hundred English\n"
                    "words and a ChatML chat template. It serves POST /v1/chat/completions and /v1/completions;\n"
                    "its replies are readable babble: greedy ones run until max_tokens, sampled ones end now and\n"
                    "then.\n");
}

}  // namespace prism::tools::demo
