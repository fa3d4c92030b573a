// BPE: byte-level (GPT-2, Llama 3) and SentencePiece-style (Llama 2, Mistral: byte_fallback,
// fuse_unk). Reproduces HF tokenizers' BPE model id for id: the same initial symbols
// (characters with continuing_subword_prefix / end_of_word_suffix, unknowns as byte tokens
// or one fused unk), the same merge order (lowest rank, then leftmost) and the same handling
// of duplicate merges (the later rank wins). It sees one pre-tokenized piece; it must not
// normalise, split or decode.
#include <algorithm>
#include <array>
#include <string>

#include "base/check.h"
#include "text/models/model_common.h"
#include "text/token_model.h"

namespace prism::text {
namespace {

using models::StringIdMap;
using models::U64Map;

// Code points below this, when there is no prefix/suffix, resolve through a flat table (the
// whole GPT-2 byte alphabet is below U+0144) instead of a string hash.
constexpr uint32_t kDirectChars = 0x800;

uint64_t pair_key(TokenId a, TokenId b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

struct Symbol {
  TokenId id;
  int32_t prev, next;  // indices into the symbol array; -1 at either end
  int32_t len;         // bytes of the piece covered; 0 once merged into its left neighbour
};

struct Candidate {
  uint32_t rank;
  int32_t pos;  // index of the left symbol
  TokenId new_id;
};

// Heap order: the top is the lowest rank, then the leftmost position (HF's Merge ordering).
bool after(const Candidate& a, const Candidate& b) {
  return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
}

class Bpe final : public models::VocabularyModel {
 public:
  Bpe(BpeConfig config, StringIdMap vocab, std::vector<std::string> by_id, U64Map merges,
      std::optional<TokenId> unk_id)
      : VocabularyModel(std::move(vocab), std::move(by_id)),
        config_(std::move(config)),
        merges_(std::move(merges)),
        unk_id_(unk_id) {
    byte_ids_ = models::byte_fallback_ids(vocab_);
    direct_ = config_.continuing_subword_prefix.empty() && config_.end_of_word_suffix.empty();
    if (direct_) {
      char_ids_.assign(kDirectChars, -1);
      for (const auto& [token, id] : vocab_) {
        uint32_t cp = 0;
        if (decode_one(token, cp) == token.size() && cp < kDirectChars) char_ids_[cp] = id;
      }
    }
  }

  void tokenize(std::string_view piece, std::vector<TokenId>& out) const override;


 private:
  // Bytes of the first UTF-8 character of s (>= 1 when s is not empty) and its code point.
  static size_t decode_one(std::string_view s, uint32_t& cp) {
    if (s.empty()) return 0;
    auto c = static_cast<unsigned char>(s[0]);
    size_t n = std::min<size_t>(utf8_sequence_length(static_cast<unsigned char>(c)), s.size());
    static constexpr unsigned char kLeadMask[5] = {0, 0x7F, 0x1F, 0x0F, 0x07};
    cp = c & kLeadMask[n];
    for (size_t i = 1; i < n; ++i) cp = (cp << 6) | (static_cast<unsigned char>(s[i]) & 0x3F);
    return n;
  }
  void build_symbols(std::string_view piece, std::vector<Symbol>& symbols) const;
  void merge_all(std::vector<Symbol>& symbols) const;

  BpeConfig config_;  // vocab and merges moved out into the tables below
  U64Map merges_;  // pair_key(left, right) -> rank << 32 | merged id
  std::optional<TokenId> unk_id_;
  std::array<TokenId, 256> byte_ids_;  // "<0xAB>" ids, -1 when absent
  bool direct_ = false;                // no prefix/suffix: char_ids_ is valid
  std::vector<TokenId> char_ids_;      // [kDirectChars] code point -> id, -1 when absent
};

// NOTE: mirrors HF's BPE::merge_word: a character in the vocab is one symbol; otherwise its
// bytes (prefix/suffix included) become byte-token symbols when every one exists; otherwise
// it joins a pending unk, fused with the previous unk when fuse_unk, dropped when there is no
// unk token (HF would have errored at load; we validate unk at load instead).
void Bpe::build_symbols(std::string_view piece, std::vector<Symbol>& symbols) const {
  thread_local std::string spelled;  // prefix + char + suffix
  thread_local std::vector<TokenId> fallback;
  TokenId pending_unk = -1;
  int32_t pending_len = 0;
  auto add = [&symbols](TokenId id, int32_t len) {
    auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, n - 1, n + 1, len});
  };
  auto flush_unk = [&] {
    if (pending_unk >= 0) add(pending_unk, pending_len);
    pending_unk = -1;
  };
  size_t i = 0;
  while (i < piece.size()) {
    uint32_t cp = 0;
    size_t n = decode_one(piece.substr(i), cp);
    bool first = i == 0, last = i + n == piece.size();
    std::string_view ch = piece.substr(i, n);
    std::string_view s = ch;
    TokenId id = -1;
    if (direct_ && cp < kDirectChars && n == utf8_sequence_length(static_cast<unsigned char>(ch[0]))) {
      id = char_ids_[cp];
    } else {
      if (!direct_) {
        spelled.clear();
        if (!first) spelled.append(config_.continuing_subword_prefix);
        spelled.append(ch);
        if (last) spelled.append(config_.end_of_word_suffix);
        s = spelled;
      }
      id = models::find_id(vocab_, s).value_or(-1);
    }
    i += n;
    if (id >= 0) {
      flush_unk();
      add(id, static_cast<int32_t>(n));
      continue;
    }
    if (config_.byte_fallback) {
      fallback.clear();
      if (models::append_byte_fallback(byte_ids_, s, fallback)) {
        // HF adds byte symbols without flushing a pending unk first; the unk lands after them.
        for (TokenId b : fallback) add(b, 1);
        continue;
      }
    }
    if (!unk_id_) continue;
    if (pending_unk >= 0 && config_.fuse_unk) {
      pending_len += static_cast<int32_t>(n);
    } else {
      flush_unk();
      pending_unk = *unk_id_;
      pending_len = static_cast<int32_t>(n);
    }
  }
  flush_unk();
  if (!symbols.empty()) symbols.back().next = -1;
}

// NOTE: a min-heap of candidate merges over a doubly-linked list of symbols. Entries are
// invalidated lazily: a popped entry applies only if its left symbol is alive, has a right
// neighbour, and that pair still merges into the same id (HF's test). Each merge pushes at
// most two entries, so a piece of n characters costs O(n log n).
void Bpe::merge_all(std::vector<Symbol>& symbols) const {
  thread_local std::vector<Candidate> heap;
  heap.clear();
  auto lookup = [this](TokenId a, TokenId b, Candidate& c) {
    const uint64_t* v = merges_.find(pair_key(a, b));
    if (!v) return false;
    c.rank = static_cast<uint32_t>(*v >> 32);
    c.new_id = static_cast<TokenId>(static_cast<uint32_t>(*v));
    return true;
  };
  Candidate c;
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (lookup(symbols[i].id, symbols[i + 1].id, c)) {
      c.pos = static_cast<int32_t>(i);
      heap.push_back(c);
    }
  }
  std::make_heap(heap.begin(), heap.end(), after);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), after);
    Candidate top = heap.back();
    heap.pop_back();
    Symbol& left = symbols[top.pos];
    if (left.len == 0 || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    if (!lookup(left.id, right.id, c) || c.new_id != top.new_id) continue;
    left.id = top.new_id;
    left.len += right.len;
    left.next = right.next;
    right.len = 0;
    if (left.next >= 0) symbols[left.next].prev = top.pos;
    if (left.prev >= 0 && lookup(symbols[left.prev].id, left.id, c)) {
      c.pos = left.prev;
      heap.push_back(c);
      std::push_heap(heap.begin(), heap.end(), after);
    }
    if (left.next >= 0 && lookup(left.id, symbols[left.next].id, c)) {
      c.pos = top.pos;
      heap.push_back(c);
      std::push_heap(heap.begin(), heap.end(), after);
    }
  }
}

void Bpe::tokenize(std::string_view piece, std::vector<TokenId>& out) const {
  if (piece.empty()) return;
  if (config_.ignore_merges) {
    if (std::optional<TokenId> id = models::find_id(vocab_, piece)) {
      out.push_back(*id);
      return;
    }
  }
  thread_local std::vector<Symbol> symbols;
  symbols.clear();
  build_symbols(piece, symbols);
  merge_all(symbols);
  for (const Symbol& s : symbols)
    if (s.len > 0) out.push_back(s.id);
}

}  // namespace

Result<std::unique_ptr<TokenModel>> make_bpe(BpeConfig config) {
  StringIdMap vocab;
  std::vector<std::string> by_id;
  PRISM_RETURN_IF_ERROR(models::build_vocab(config.vocab, vocab, by_id));
  std::optional<TokenId> unk_id;
  if (config.unk_token) {
    unk_id = models::find_id(vocab, *config.unk_token);
    if (!unk_id) return invalid_argument("bpe: unk token '" + *config.unk_token + "' is not in the vocabulary");
  }
  if (config.merges.size() >= (size_t{1} << 32)) return invalid_argument("bpe: too many merges");
  // NOTE: as HF, the merged token is left + right without right's continuing_subword_prefix.
  const size_t prefix_len = config.continuing_subword_prefix.size();
  U64Map merges;
  merges.reserve(config.merges.size());
  std::string merged;
  for (size_t rank = 0; rank < config.merges.size(); ++rank) {
    const auto& [a, b] = config.merges[rank];
    std::optional<TokenId> a_id = models::find_id(vocab, a), b_id = models::find_id(vocab, b);
    if (!a_id || !b_id)
      return invalid_argument("bpe: merge '" + a + " " + b + "' uses a token not in the vocabulary");
    if (b.size() < prefix_len)
      return invalid_argument("bpe: merge '" + a + " " + b + "' is shorter than the subword prefix");
    merged.assign(a).append(b, prefix_len);
    std::optional<TokenId> m_id = models::find_id(vocab, merged);
    if (!m_id) return invalid_argument("bpe: merge result '" + merged + "' is not in the vocabulary");
    merges.put(pair_key(*a_id, *b_id), (static_cast<uint64_t>(rank) << 32) | static_cast<uint32_t>(*m_id));
  }
  config.vocab.clear();
  config.vocab.shrink_to_fit();
  config.merges.clear();
  config.merges.shrink_to_fit();
  return std::unique_ptr<TokenModel>(
      std::make_unique<Bpe>(std::move(config), std::move(vocab), std::move(by_id), std::move(merges), unk_id));
}

}  // namespace prism::text
