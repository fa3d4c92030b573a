// What the model stage's three models share: byte-fallback ids ("<0xAB>" tokens, the
// SentencePiece way to spell a character the vocabulary lacks), a vocabulary map that looks
// up string_views without allocating, a flat u64 -> u64 hash map for the hot lookups (BPE
// merge pairs, Unigram trie edges). Internal to text/models/: nothing
// here is part of the TokenModel interface, and nothing here owns a tokenizer's state.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "text/token_model.h"
#include "text/utf8.h"

namespace prism::text::models {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// string -> id; find(std::string_view) does not build a std::string.
using StringIdMap = std::unordered_map<std::string, TokenId, StringHash, std::equal_to<>>;

inline std::optional<TokenId> find_id(const StringIdMap& map, std::string_view s) {
  auto it = map.find(s);
  if (it == map.end()) return std::nullopt;
  return it->second;
}

// Fills map and by_id (by_id[id] = string; "" for ids nobody uses). A repeated string or a
// negative id is an error; a repeated id keeps its first string for id_to_token.
inline Status build_vocab(const std::vector<std::pair<std::string, TokenId>>& vocab, StringIdMap& map,
                          std::vector<std::string>& by_id) {
  if (vocab.empty()) return invalid_argument("empty vocabulary");
  map.reserve(vocab.size());
  TokenId max_id = -1;
  for (const auto& [token, id] : vocab) {
    if (id < 0) return invalid_argument("negative id " + std::to_string(id) + " for token '" + token + "'");
    if (!map.emplace(token, id).second) return invalid_argument("duplicate token '" + token + "' in the vocabulary");
    if (id > max_id) max_id = id;
  }
  by_id.assign(static_cast<size_t>(max_id) + 1, std::string());
  std::vector<bool> seen(by_id.size(), false);
  for (const auto& [token, id] : vocab)
    if (!seen[id]) seen[id] = true, by_id[id] = token;
  return Status();
}

// The vocabulary half every model answers the same way: string <-> id lookups over the
// vocabulary it was built with.
class VocabularyModel : public TokenModel {
 public:
  std::optional<TokenId> token_to_id(std::string_view token) const override { return find_id(vocab_, token); }
  std::string_view id_to_token(TokenId id) const override {
    if (id < 0 || static_cast<size_t>(id) >= by_id_.size()) return {};
    return by_id_[id];
  }
  int32_t vocab_size() const override { return static_cast<int32_t>(by_id_.size()); }

 protected:
  VocabularyModel(StringIdMap vocab, std::vector<std::string> by_id)
      : vocab_(std::move(vocab)), by_id_(std::move(by_id)) {}

  StringIdMap vocab_;
  std::vector<std::string> by_id_;  // id -> string; "" for ids the vocabulary skips
};

// "<0xAB>": HF formats the byte as {:#04X} ("<0x0A>"), SentencePiece as "<0x%02X>"; same text.
inline std::string byte_token(unsigned char b) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
  return buf;
}

// ids[b] = id of "<0xBB>", or -1 when the vocabulary lacks it.
inline std::array<TokenId, 256> byte_fallback_ids(const StringIdMap& vocab) {
  std::array<TokenId, 256> ids;
  for (int b = 0; b < 256; ++b) ids[b] = find_id(vocab, byte_token(static_cast<unsigned char>(b))).value_or(-1);
  return ids;
}

// Appends the byte tokens of s; false (and appends nothing) when any byte token is missing,
// in which case the caller falls back to unk as HF does.
inline bool append_byte_fallback(const std::array<TokenId, 256>& ids, std::string_view s,
                                 std::vector<TokenId>& out) {
  for (unsigned char b : s)
    if (ids[b] < 0) return false;
  for (unsigned char b : s) out.push_back(ids[b]);
  return true;
}

// NOTE: open addressing, linear probing, load factor <= 1/2, built once then read-only (so
// concurrent finds are safe). kEmpty is never a valid key: BPE keys are two non-negative
// 31-bit ids, trie keys are node << 8 | byte.
class U64Map {
 public:
  static constexpr uint64_t kEmpty = ~uint64_t{0};

  void reserve(size_t n) {
    size_t cap = 16;
    shift_ = 60;
    while (cap < 2 * n) cap <<= 1, --shift_;
    keys_.assign(cap, kEmpty);
    values_.assign(cap, 0);
    mask_ = cap - 1;
    size_ = 0;
  }
  // Inserts or overwrites (a later duplicate wins, as a Rust HashMap collect does).
  void put(uint64_t key, uint64_t value) {
    if (2 * (size_ + 1) > keys_.size()) grow();
    size_t i = slot(key);
    while (keys_[i] != kEmpty && keys_[i] != key) i = (i + 1) & mask_;
    if (keys_[i] == kEmpty) ++size_;
    keys_[i] = key;
    values_[i] = value;
  }
  const uint64_t* find(uint64_t key) const {
    if (keys_.empty()) return nullptr;
    size_t i = slot(key);
    while (true) {
      uint64_t k = keys_[i];
      if (k == key) return &values_[i];
      if (k == kEmpty) return nullptr;
      i = (i + 1) & mask_;
    }
  }
  size_t size() const { return size_; }

 private:
  size_t slot(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_); }
  void grow() {
    std::vector<uint64_t> keys = std::move(keys_), values = std::move(values_);
    reserve(keys.empty() ? 16 : keys.size());
    for (size_t i = 0; i < keys.size(); ++i)
      if (keys[i] != kEmpty) put(keys[i], values[i]);
  }

  std::vector<uint64_t> keys_, values_;
  size_t mask_ = 0;
  int shift_ = 60;  // 64 - log2(capacity): a Fibonacci hash takes the product's top bits
  size_t size_ = 0;
};

}  // namespace prism::text::models
