// Tokenizer: picks a backend by file layout, then applies what every backend shares — UTF-8
// repair, truncation (before special tokens, reserving room for them, as HF does), the
// post-processor, padding and OpenMP batch encoding.
#include "text/tokenizer.h"

#include <omp.h>

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "text/tokenizer_backend.h"
#include "text/utf8.h"

namespace prism::text {
namespace fs = std::filesystem;

namespace {

// tokenizer_config.json's "bos_token" etc.: a string or {"content": ...}.
std::optional<std::string> config_token(const nlohmann::json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  return std::nullopt;
}

// The first of the names the tokenizer knows.
std::optional<TokenId> first_known(const TokenizerBackend& b, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (auto id = b.token_to_id(n)) return id;
  return std::nullopt;
}

// From tokenizer_config.json when the directory has one, else by the conventional names.
SpecialTokenIds find_special_tokens(const TokenizerBackend& b, const nlohmann::json& config,
                                    const std::optional<PaddingConfig>& padding) {
  SpecialTokenIds s;
  s.bos = first_known(b, {"<s>", "<|begin_of_text|>", "<|startoftext|>", "<|endoftext|>"});
  s.eos = first_known(b, {"</s>", "<|end_of_text|>", "<|endoftext|>"});
  s.pad = first_known(b, {"[PAD]", "<pad>", "<|pad|>"});
  s.unk = first_known(b, {"[UNK]", "<unk>", "<|endoftext|>"});
  s.cls = first_known(b, {"[CLS]"});
  s.sep = first_known(b, {"[SEP]"});
  s.mask = first_known(b, {"[MASK]", "<mask>"});
  const std::pair<const char*, std::optional<TokenId>*> keys[] = {
      {"bos_token", &s.bos}, {"eos_token", &s.eos}, {"pad_token", &s.pad}, {"unk_token", &s.unk},
      {"cls_token", &s.cls}, {"sep_token", &s.sep}, {"mask_token", &s.mask}};
  for (const auto& [key, slot] : keys) {
    if (auto name = config_token(config, key))
      if (auto id = b.token_to_id(*name)) *slot = id;
  }
  if (padding) s.pad = padding->pad_id;
  return s;
}

// tokenizer_config.json next to the tokenizer files; null when absent or unreadable.
nlohmann::json read_tokenizer_config(const fs::path& dir) {
  auto text = read_file((dir / "tokenizer_config.json").string());
  if (!text) return nlohmann::json::object();
  auto j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j : nlohmann::json::object();
}

Result<LoadedTokenizer> load_by_layout(const fs::path& path, const nlohmann::json& config) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    if (fs::exists(path / "tokenizer.json")) return load_by_layout(path / "tokenizer.json", config);
    if (fs::exists(path / "tokenizer.model")) return load_sentencepiece((path / "tokenizer.model").string());
    if (fs::exists(path / "vocab.json") && fs::exists(path / "merges.txt"))
      return load_gpt2_vocab((path / "vocab.json").string(), (path / "merges.txt").string());
    if (fs::exists(path / "vocab.txt")) return load_by_layout(path / "vocab.txt", config);
    return not_found("no tokenizer in '" + path.string() +
                     "': looked for tokenizer.json, tokenizer.model, vocab.json + merges.txt, vocab.txt");
  }
  if (!fs::exists(path, ec)) return not_found("tokenizer path '" + path.string() + "' does not exist");
  const std::string name = path.filename().string();
  const std::string ext = path.extension().string();
  if (ext == ".json" && name != "vocab.json") {
    PRISM_ASSIGN_OR_RETURN(std::string json, read_file(path.string()));
    auto loaded = load_tokenizer_json(json);
    if (!loaded) return Status(loaded.status().code(), path.string() + ": " + loaded.status().message());
    return loaded;
  }
  if (ext == ".model") return load_sentencepiece(path.string());
  if (name == "vocab.json") {
    const fs::path merges = path.parent_path() / "merges.txt";
    if (!fs::exists(merges)) return not_found("'" + path.string() + "' needs merges.txt next to it");
    return load_gpt2_vocab(path.string(), merges.string());
  }
  if (ext == ".txt") {
    auto lower = config.find("do_lower_case");
    return load_bert_vocab(path.string(), lower == config.end() || !lower->is_boolean() || lower->get<bool>());
  }
  // (Built by append: GCC 12 warns falsely on "'" + string + "...".)
  std::string message = path.string();
  message.append(" is not a tokenizer file (tokenizer.json, *.model, vocab.json, vocab.txt)");
  return invalid_argument(std::move(message));
}

void truncate_to(Encoding& e, size_t n, Direction direction) {
  if (e.size() <= n) return;
  auto cut = [&](auto& v) {
    if (direction == Direction::right) {
      v.resize(n);
    } else {
      v.erase(v.begin(), v.end() - static_cast<std::ptrdiff_t>(n));
    }
  };
  cut(e.ids);
  cut(e.type_ids);
  cut(e.special_tokens_mask);
  cut(e.attention_mask);
}

Encoding plain_encoding(std::vector<TokenId> ids) {
  Encoding e;
  const size_t n = ids.size();
  e.ids = std::move(ids);
  e.type_ids.assign(n, 0);
  e.special_tokens_mask.assign(n, 0);
  e.attention_mask.assign(n, 1);
  return e;
}

}  // namespace

Result<Tokenizer> Tokenizer::load(const std::string& path) {
  const fs::path p(path);
  std::error_code ec;
  const fs::path dir = fs::is_directory(p, ec) ? p : p.parent_path();
  const nlohmann::json config = read_tokenizer_config(dir);
  PRISM_ASSIGN_OR_RETURN(LoadedTokenizer loaded, load_by_layout(p, config));
  Tokenizer t;
  t.special_ = find_special_tokens(*loaded.backend, config, loaded.padding);
  t.backend_ = std::move(loaded.backend);
  t.truncation_ = loaded.truncation;
  t.padding_ = loaded.padding;
  return t;
}

Result<Tokenizer> Tokenizer::from_json(std::string_view json) {
  PRISM_ASSIGN_OR_RETURN(LoadedTokenizer loaded, load_tokenizer_json(json));
  Tokenizer t;
  t.special_ = find_special_tokens(*loaded.backend, nlohmann::json::object(), loaded.padding);
  t.backend_ = std::move(loaded.backend);
  t.truncation_ = loaded.truncation;
  t.padding_ = loaded.padding;
  return t;
}

Encoding Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  Encoding e = encode_parts(text, nullptr, add_special_tokens);
  pad(std::span<Encoding>(&e, 1));
  return e;
}

Encoding Tokenizer::encode_pair(std::string_view a, std::string_view b, bool add_special_tokens) const {
  Encoding e = encode_parts(a, &b, add_special_tokens);
  pad(std::span<Encoding>(&e, 1));
  return e;
}

std::vector<Encoding> Tokenizer::encode_batch(const std::vector<std::string>& texts, bool add_special_tokens) const {
  std::vector<Encoding> out(texts.size());
  const int64_t n = static_cast<int64_t>(texts.size());
  // NOTE: dynamic schedule: document lengths vary a lot, static chunks would leave threads idle.
  // The team is the calling thread's: the whole pool for a command line tool's main thread, one
  // thread on the server's I/O threads (api/http_server.cpp sets it), which must not start a
  // team beside the engines' compute pool.
#pragma omp parallel for schedule(dynamic, 8) if (n > 1)
  for (int64_t i = 0; i < n; ++i) out[i] = encode_parts(texts[i], nullptr, add_special_tokens);
  pad(out);
  return out;
}

Encoding Tokenizer::encode_parts(std::string_view a, const std::string_view* b, bool add_special_tokens) const {
  std::vector<Encoding> parts;
  parts.reserve(2);
  // NOTE: ids grow in a per-thread buffer and are copied out once at their final size: a
  // result that outlives the call (encode_batch keeps them all) costs one allocation, not the
  // chain of reallocations push_back makes.
  thread_local std::vector<TokenId> ids;
  for (const std::string_view* t : {static_cast<const std::string_view*>(&a), b}) {
    if (t == nullptr) continue;
    ids.clear();
    if (is_valid_utf8(*t)) {
      backend_->encode(*t, ids);
    } else {
      backend_->encode(to_valid_utf8(*t), ids);
    }
    parts.push_back(plain_encoding(std::vector<TokenId>(ids.begin(), ids.end())));
  }
  truncate(parts, add_special_tokens);
  backend_->post_process(parts, add_special_tokens);
  Encoding out = std::move(parts[0]);
  for (size_t i = 1; i < parts.size(); ++i) out.append(parts[i]);
  return out;
}

void Tokenizer::truncate(std::vector<Encoding>& parts, bool add_special_tokens) const {
  if (!truncation_) return;
  const TruncationConfig& t = *truncation_;
  const bool pair = parts.size() == 2;
  const size_t reserved = add_special_tokens ? backend_->num_special_tokens(pair) : 0;
  const size_t max_length = t.max_length > reserved ? t.max_length - reserved : 0;
  if (!pair) {
    truncate_to(parts[0], max_length, t.direction);
    return;
  }
  const size_t n1 = parts[0].size(), n2 = parts[1].size();
  if (n1 + n2 <= max_length) return;
  switch (t.strategy) {
    case TruncationStrategy::longest_first: {
      // NOTE: HF's rule: the shorter keeps all it can up to half, the longer takes the rest.
      size_t shorter = std::min(n1, n2), longer;
      if (shorter > max_length) {
        longer = shorter;
      } else {
        longer = std::max(shorter, max_length - shorter);
      }
      if (shorter + longer > max_length) {
        shorter = max_length / 2;
        longer = shorter + max_length % 2;
      }
      const bool first_longer = n1 > n2;
      truncate_to(parts[0], first_longer ? longer : shorter, t.direction);
      truncate_to(parts[1], first_longer ? shorter : longer, t.direction);
      break;
    }
    case TruncationStrategy::only_first:
    case TruncationStrategy::only_second: {
      // HF errors when the chosen part is too short; here it shrinks as far as it can.
      Encoding& target = parts[t.strategy == TruncationStrategy::only_first ? 0 : 1];
      const size_t to_remove = n1 + n2 - max_length;
      truncate_to(target, target.size() > to_remove ? target.size() - to_remove : 0, t.direction);
      break;
    }
  }
}

void Tokenizer::pad(std::span<Encoding> batch) const {
  if (!padding_ || batch.empty()) return;
  const PaddingConfig& p = *padding_;
  size_t target = p.fixed_length;
  if (p.strategy == PaddingStrategy::batch_longest) {
    target = 0;
    for (const Encoding& e : batch) target = std::max(target, e.size());
  }
  if (p.pad_to_multiple_of && *p.pad_to_multiple_of > 0) {
    const size_t m = *p.pad_to_multiple_of;
    target = (target + m - 1) / m * m;
  }
  for (Encoding& e : batch) {
    if (e.size() >= target) continue;
    const size_t n = target - e.size();
    auto grow = [&](auto& v, auto value) {
      using T = typename std::decay_t<decltype(v)>::value_type;
      if (p.direction == Direction::right) {
        v.insert(v.end(), n, static_cast<T>(value));
      } else {
        v.insert(v.begin(), n, static_cast<T>(value));
      }
    };
    grow(e.ids, p.pad_id);
    grow(e.type_ids, p.pad_type_id);
    grow(e.special_tokens_mask, 1);
    grow(e.attention_mask, 0);
  }
}

Result<std::string> Tokenizer::decode(std::span<const TokenId> ids, bool skip_special_tokens) const {
  return backend_->decode(ids, skip_special_tokens);
}

std::optional<TokenId> Tokenizer::token_to_id(std::string_view token) const { return backend_->token_to_id(token); }
std::string Tokenizer::id_to_token(TokenId id) const { return backend_->id_to_token(id); }
int32_t Tokenizer::vocab_size() const { return backend_->vocab_size(); }

}  // namespace prism::text
