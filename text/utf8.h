// UTF-8 helpers for the tokenizer pipeline: decode/encode one code point, the lossy repair
// of invalid input (each maximal invalid subsequence -> U+FFFD, as Rust's
// String::from_utf8_lossy does, so ids match Hugging Face tokenizers), and the few Unicode
// character classes (via utf8proc) that normalizers and pre-tokenizers share.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace prism::text {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// Decodes the code point at s[i] and advances i. On invalid input returns U+FFFD and advances
// past the maximal invalid subsequence (at least one byte).
char32_t next_code_point(std::string_view s, size_t& i);

// Appends the UTF-8 encoding of cp (U+FFFD for surrogates and values past U+10FFFF).
void append_utf8(std::string& out, char32_t cp);

// Length of the UTF-8 sequence a lead byte starts; a stray continuation byte or an invalid
// lead byte (0xF8..0xFF) counts as one byte, so malformed input still advances.
inline size_t utf8_sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

bool is_valid_utf8(std::string_view s);

// s unchanged when valid; otherwise each maximal invalid subsequence becomes U+FFFD.
std::string to_valid_utf8(std::string_view s);

// Character classes with Hugging Face's (Rust char) meaning.
bool is_whitespace(char32_t c);    // Unicode White_Space (char::is_whitespace)
bool is_bert_whitespace(char32_t c);  // BERT: \t \n \r space, or Unicode Zs
bool is_control(char32_t c);       // BERT: category Cc/Cf/Cn/Co, but not \t \n \r
bool is_punctuation(char32_t c);   // ASCII punctuation or Unicode P*
bool is_chinese_char(char32_t c);  // the CJK ideograph blocks BERT isolates
bool is_mark_nonspacing(char32_t c);  // Mn
bool is_combining_mark(char32_t c);   // Mn, Mc, Me
bool is_alphanumeric(char32_t c);     // char::is_alphanumeric: L*, Nd, Nl, No

}  // namespace prism::text
