// Normalizer components. NOTE: every one maps valid UTF-8 to valid UTF-8 and is a pure
// function of its input, so the pipeline can run them on any thread. The rewriting ones build
// their output in a per-thread buffer and swap it with the text, so long documents do not
// allocate afresh on every call.
#include "text/normalizers.h"

#include <utf8proc.h>

#include <cstdlib>

#include "text/utf8.h"

namespace prism::text {

void LowercaseNormalizer::normalize(std::string& text) const {
  thread_local std::string out;  // swapped with text below: both keep their capacity
  out.clear();
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char b = static_cast<unsigned char>(text[i]);
    if (b < 0x80) {
      out.push_back(b >= 'A' && b <= 'Z' ? static_cast<char>(b + 32) : static_cast<char>(b));
      ++i;
      continue;
    }
    const char32_t c = next_code_point(text, i);
    if (c == 0x130) {  // the one multi-char lowercase mapping in Unicode: İ -> i + U+0307
      out += "i\xCC\x87";
      continue;
    }
    append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
  }
  text.swap(out);
}

void UnicodeNormalizer::normalize(std::string& text) const {
  bool ascii = true;
  for (char c : text) ascii &= static_cast<unsigned char>(c) < 0x80;
  if (ascii) return;  // every normal form of ASCII is itself
  int options = UTF8PROC_STABLE;
  switch (form_) {
    case UnicodeForm::nfc: options |= UTF8PROC_COMPOSE; break;
    case UnicodeForm::nfd: options |= UTF8PROC_DECOMPOSE; break;
    case UnicodeForm::nfkc: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case UnicodeForm::nfkd: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &out,
                                          static_cast<utf8proc_option_t>(options));
  if (n >= 0) text.assign(reinterpret_cast<char*>(out), static_cast<size_t>(n));
  std::free(out);  // n < 0 cannot happen on valid UTF-8; the text stays as it was
}

namespace {
// Drops every code point `drop` selects, in place.
template <class Pred>
void remove_code_points(std::string& text, Pred drop) {
  thread_local std::string out;  // swapped with text below: both keep their capacity
  out.clear();
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const size_t start = i;
    const char32_t c = next_code_point(text, i);
    if (!drop(c)) out.append(text, start, i - start);
  }
  text.swap(out);
}
}  // namespace

void StripAccentsNormalizer::normalize(std::string& text) const { remove_code_points(text, is_combining_mark); }

void BertNormalizer::normalize(std::string& text) const {
  thread_local std::string out;
  out.clear();
  out.reserve(text.size() + text.size() / 4);
  size_t i = 0;
  while (i < text.size()) {
    const size_t start = i;
    const char32_t c = next_code_point(text, i);
    if (config_.clean_text) {
      if (c == 0 || c == kReplacementChar || is_control(c)) continue;
      if (is_bert_whitespace(c)) {
        out.push_back(' ');
        continue;
      }
    }
    if (config_.handle_chinese_chars && is_chinese_char(c)) {
      out.push_back(' ');
      out.append(text, start, i - start);
      out.push_back(' ');
      continue;
    }
    out.append(text, start, i - start);
  }
  text.swap(out);
  if (config_.strip_accents.value_or(config_.lowercase)) {
    UnicodeNormalizer(UnicodeForm::nfd).normalize(text);
    remove_code_points(text, is_mark_nonspacing);  // BERT strips only Mn, unlike StripAccents
  }
  if (config_.lowercase) LowercaseNormalizer().normalize(text);
}

std::string replace_all(const Regex& pattern, std::string_view text, std::string_view content) {
  std::vector<Match> matches;
  pattern.find_all(text, matches);
  if (matches.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size());
  size_t prev = 0;
  for (const Match& m : matches) {
    out.append(text.substr(prev, m.begin - prev));
    out.append(content);
    prev = m.end;
  }
  out.append(text.substr(prev));
  return out;
}

void ReplaceNormalizer::normalize(std::string& text) const { text = replace_all(pattern_, text, content_); }

void PrependNormalizer::normalize(std::string& text) const {
  if (!text.empty()) text.insert(0, prepend_);
}

void StripNormalizer::normalize(std::string& text) const {
  size_t begin = 0, end = text.size();
  if (left_) {
    while (begin < end) {
      size_t i = begin;
      if (!is_whitespace(next_code_point(text, i))) break;
      begin = i;
    }
  }
  if (right_) {
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
      size_t i = start;
      if (!is_whitespace(next_code_point(text, i))) break;
      end = start;
    }
  }
  text = text.substr(begin, end - begin);
}

void NmtNormalizer::normalize(std::string& text) const {
  thread_local std::string out;  // swapped with text below: both keep their capacity
  out.clear();
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const size_t start = i;
    const char32_t c = next_code_point(text, i);
    if ((c >= 0x01 && c <= 0x08) || c == 0x0B || (c >= 0x0E && c <= 0x1F) || c == 0x7F || c == 0x8F || c == 0x9F)
      continue;
    if (c == 0x09 || c == 0x0A || c == 0x0C || c == 0x0D || c == 0x1680 || (c >= 0x200B && c <= 0x200F) ||
        c == 0x2028 || c == 0x2029 || c == 0x2581 || c == 0xFEFF || c == 0xFFFD) {
      out.push_back(' ');
      continue;
    }
    out.append(text, start, i - start);
  }
  text.swap(out);
}

void SequenceNormalizer::normalize(std::string& text) const {
  for (const auto& step : steps_) step->normalize(text);
}

}  // namespace prism::text
