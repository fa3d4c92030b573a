// Precompiled charsmap. NOTE: a darts-clone unit is one u32: bits 0-7 the label (with bit 31
// set on a leaf unit, so a leaf never matches a label), bit 8 "has a leaf child", bit 9 an
// offset scale flag, bits 10-31 the offset to the children (shifted left by 8 when the flag is
// set); a leaf's bits 0-30 are the value. From node n, byte c leads to n ^ offset(unit[n]) ^ c,
// valid when that unit's label is c; a key ends at a node whose unit has the leaf bit, and its
// value sits in the leaf child at n ^ offset(unit[n]). Every index is bounds-checked: the blob
// comes from a file.
#include "text/precompiled.h"

#include <cstring>

#include <utf8proc.h>

#include "text/utf8.h"

namespace prism::text {
namespace {

uint32_t unit_label(uint32_t u) { return u & ((1u << 31) | 0xFFu); }
bool unit_has_leaf(uint32_t u) { return ((u >> 8) & 1u) != 0; }
uint32_t unit_value(uint32_t u) { return u & ((1u << 31) - 1); }
uint32_t unit_offset(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }

// End of the extended grapheme cluster that starts at text[i].
size_t cluster_end(std::string_view text, size_t i) {
  size_t k = i;
  char32_t prev = next_code_point(text, k);
  utf8proc_int32_t state = 0;  // 0: a cluster starts at prev
  while (k < text.size()) {
    size_t next = k;
    const char32_t c = next_code_point(text, next);
    if (utf8proc_grapheme_break_stateful(static_cast<utf8proc_int32_t>(prev), static_cast<utf8proc_int32_t>(c), &state))
      break;
    prev = c;
    k = next;
  }
  return k;
}

}  // namespace

Result<CharsMap> CharsMap::parse(std::string_view blob) {
  CharsMap m;
  if (blob.empty()) return m;
  if (blob.size() < 4) return invalid_argument("precompiled_charsmap: shorter than its 4-byte header");
  uint32_t trie_bytes = 0;
  for (int b = 3; b >= 0; --b) trie_bytes = (trie_bytes << 8) | static_cast<unsigned char>(blob[b]);
  if (trie_bytes % 4 != 0 || trie_bytes > blob.size() - 4)
    return invalid_argument("precompiled_charsmap: trie size " + std::to_string(trie_bytes) + " does not fit the " +
                            std::to_string(blob.size()) + "-byte blob");
  m.units_.resize(trie_bytes / 4);
  for (size_t i = 0; i < m.units_.size(); ++i) {
    const auto* p = reinterpret_cast<const unsigned char*>(blob.data() + 4 + 4 * i);
    m.units_[i] = uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
  }
  m.pool_.assign(blob.substr(4 + trie_bytes));
  return m;
}

template <class OnMatch>
void CharsMap::common_prefix_search(std::string_view key, OnMatch&& on_match) const {
  if (units_.empty()) return;
  size_t node = unit_offset(units_[0]);
  for (size_t i = 0; i < key.size(); ++i) {
    const auto c = static_cast<unsigned char>(key[i]);
    if (c == 0) return;  // darts keys never contain NUL
    node ^= c;
    if (node >= units_.size()) return;
    const uint32_t u = units_[node];
    if (unit_label(u) != c) return;
    node ^= unit_offset(u);
    if (unit_has_leaf(u)) {
      if (node >= units_.size()) return;
      if (!on_match(i + 1, unit_value(units_[node]))) return;
    }
  }
}

std::optional<std::string_view> CharsMap::replacement_at(uint32_t offset) const {
  if (offset >= pool_.size()) return std::nullopt;
  const char* begin = pool_.data() + offset;
  const void* nul = std::memchr(begin, 0, pool_.size() - offset);
  const size_t length = nul ? static_cast<const char*>(nul) - begin : pool_.size() - offset;
  return std::string_view(begin, length);
}

std::optional<std::string_view> CharsMap::shortest_prefix(std::string_view key) const {
  std::optional<uint32_t> value;
  common_prefix_search(key, [&](size_t, uint32_t v) {
    value = v;
    return false;
  });
  if (!value) return std::nullopt;
  return replacement_at(*value);
}

size_t CharsMap::longest_prefix(std::string_view key, std::string_view& replacement) const {
  size_t best = 0;
  uint32_t value = 0;
  common_prefix_search(key, [&](size_t length, uint32_t v) {
    best = length;
    value = v;
    return true;
  });
  if (best == 0) return 0;
  auto r = replacement_at(value);
  if (!r) return 0;
  replacement = *r;
  return best;
}

PrecompiledNormalizer::PrecompiledNormalizer(CharsMap map) : map_(std::move(map)) {
  for (int c = 0; c < 128; ++c) {
    const char ch = static_cast<char>(c);
    if (auto r = map_.shortest_prefix(std::string_view(&ch, 1))) ascii_[c] = std::string(*r);
  }
}

void PrecompiledNormalizer::normalize(std::string& text) const {
  if (map_.empty()) return;
  // NOTE: out is a per-thread buffer swapped with text, so both keep their capacity and a
  // long document does not allocate afresh on every call.
  thread_local std::string out;
  out.clear();
  out.reserve(text.size() + text.size() / 8);
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const auto b = static_cast<unsigned char>(text[i]);
    // An ASCII character followed by ASCII (or the end) is a cluster of its own, CR LF aside.
    if (b < 0x80 && b != '\r' && (i + 1 == n || static_cast<unsigned char>(text[i + 1]) < 0x80)) {
      if (ascii_[b]) {
        out += *ascii_[b];
      } else {
        out.push_back(static_cast<char>(b));
      }
      ++i;
      continue;
    }
    const size_t end = cluster_end(text, i);
    const std::string_view cluster(text.data() + i, end - i);
    if (cluster.size() < 6) {
      if (auto r = map_.shortest_prefix(cluster)) {
        out += *r;
        i = end;
        continue;
      }
    }
    size_t k = i;
    while (k < end) {
      const size_t start = k;
      next_code_point(text, k);
      const std::string_view ch(text.data() + start, k - start);
      if (ch.size() == cluster.size() && cluster.size() < 6) {
        out += ch;  // the whole-cluster lookup above already failed for it
      } else if (auto r = map_.shortest_prefix(ch)) {
        out += *r;
      } else {
        out += ch;
      }
    }
    i = end;
  }
  text.swap(out);
}

Result<std::string> base64_decode(std::string_view text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  std::string out;
  out.reserve(text.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    const int v = value(c);
    if (v < 0) return invalid_argument("base64: invalid character");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  if (bits >= 6) return invalid_argument("base64: truncated input");
  return out;
}

}  // namespace prism::text
