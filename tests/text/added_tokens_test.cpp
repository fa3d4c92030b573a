// Added-token matching on its own (HF AddedVocabulary semantics).
#include <gtest/gtest.h>

#include "text/added_tokens.h"

namespace prism::text {
namespace {

// Segments as "text" or "#id".
std::vector<std::string> run(const AddedVocabulary& v, std::string_view s, bool normalized_pass = false) {
  std::vector<Segment> segs;
  v.split(s, normalized_pass, segs);
  std::vector<std::string> out;
  for (const Segment& g : segs) out.push_back(g.token ? "#" + std::to_string(*g.token) : std::string(g.text));
  return out;
}

AddedToken tok(std::string content, TokenId id) {
  AddedToken t;
  t.content = std::move(content);
  t.id = id;
  t.special = true;
  t.normalized = false;
  return t;
}

using Strings = std::vector<std::string>;

TEST(AddedTokens, LongestMatchFirst) {
  AddedVocabulary v({tok("<s>", 1), tok("<s>x", 2), tok("</s>", 3)}, nullptr);
  EXPECT_EQ(run(v, "a<s>xb<s></s>"), (Strings{"a", "#2", "b", "#1", "#3"}));
  EXPECT_EQ(run(v, "<s"), (Strings{"<s"}));
  EXPECT_EQ(run(v, ""), (Strings{}));
}

TEST(AddedTokens, LstripRstrip) {
  AddedToken mask = tok("<mask>", 9);
  mask.lstrip = true;
  AddedVocabulary left({mask}, nullptr);
  EXPECT_EQ(run(left, "a  <mask> b"), (Strings{"a", "#9", " b"}));
  mask.lstrip = false;
  mask.rstrip = true;
  AddedVocabulary right({mask}, nullptr);
  EXPECT_EQ(run(right, "a  <mask>  b"), (Strings{"a  ", "#9", "b"}));
}

TEST(AddedTokens, SingleWord) {
  AddedToken ing = tok("ing", 5);
  ing.single_word = true;
  AddedVocabulary v({ing}, nullptr);
  EXPECT_EQ(run(v, "ing sing ing_ ing!"), (Strings{"#5", " sing ing_ ", "#5", "!"}));
}

TEST(AddedTokens, NormalizedTokensMatchInTheSecondPassOnNormalisedPatterns) {
  AddedToken hello = tok("HELLO", 7);
  hello.normalized = true;
  hello.special = false;
  LowercaseNormalizer lower;
  AddedVocabulary v({hello, tok("[X]", 8)}, &lower);
  EXPECT_EQ(run(v, "say hello [X]", false), (Strings{"say hello ", "#8"}));  // raw pass: [X] only
  EXPECT_EQ(run(v, "say hello", true), (Strings{"say ", "#7"}));            // pattern lowercased
  EXPECT_EQ(v.token_to_id("HELLO"), 7);
  EXPECT_EQ(v.find(8)->content, "[X]");
  EXPECT_EQ(v.find(99), nullptr);
}

}  // namespace
}  // namespace prism::text
