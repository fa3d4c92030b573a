// UTF-8 repair matches Rust's String::from_utf8_lossy (one U+FFFD per maximal invalid
// subsequence).
#include <gtest/gtest.h>

#include "text/utf8.h"

namespace prism::text {
namespace {

const std::string R = "\xEF\xBF\xBD";

TEST(Utf8, ValidPassesThrough) {
  EXPECT_TRUE(is_valid_utf8("héllo 中 😀 " + R));
  EXPECT_EQ(to_valid_utf8("héllo 中 😀"), "héllo 中 😀");
}

TEST(Utf8, LossyRepairLikeRust) {
  EXPECT_EQ(to_valid_utf8("a\xFF" "b"), "a" + R + "b");
  EXPECT_EQ(to_valid_utf8("\xE4\xBD"), R);                 // truncated 3-byte: one U+FFFD
  EXPECT_EQ(to_valid_utf8("\xE4\xBD" "a"), R + "a");
  EXPECT_EQ(to_valid_utf8("\xC0\x80"), R + R);             // overlong: each byte invalid
  EXPECT_EQ(to_valid_utf8("\xED\xA0\x80"), R + R + R);     // surrogate: E0-9F rule
  EXPECT_EQ(to_valid_utf8("\xF0\x9F\x98"), R);             // truncated 4-byte
  EXPECT_EQ(to_valid_utf8("\x80\x80"), R + R);             // stray continuations
  EXPECT_EQ(to_valid_utf8("\xF4\x90\x80\x80"), R + R + R + R);  // past U+10FFFF
}

TEST(Utf8, EncodeDecode) {
  for (char32_t c : {U'a', U'é', U'中', U'😀'}) {
    std::string s;
    append_utf8(s, c);
    size_t i = 0;
    EXPECT_EQ(next_code_point(s, i), c);
    EXPECT_EQ(i, s.size());
  }
}

TEST(Utf8, CharacterClasses) {
  EXPECT_TRUE(is_whitespace(U'\u3000'));
  EXPECT_FALSE(is_whitespace(U'a'));
  EXPECT_TRUE(is_punctuation(U'$'));  // ASCII punctuation counts though $ is Sc
  EXPECT_TRUE(is_punctuation(U'。'));
  EXPECT_TRUE(is_control(U'\x01'));
  EXPECT_FALSE(is_control(U'\t'));
  EXPECT_TRUE(is_chinese_char(U'中'));
  EXPECT_FALSE(is_chinese_char(U'あ'));
}

}  // namespace
}  // namespace prism::text
