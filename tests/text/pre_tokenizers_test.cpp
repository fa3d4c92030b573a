// Pre-tokenizer components on their own, expected splits derived by hand from HF semantics.
#include <gtest/gtest.h>

#include "text/pre_tokenizers.h"

namespace prism::text {
namespace {

using Strings = std::vector<std::string>;

Strings run(const PreTokenizer& p, const std::string& s) {
  std::vector<Piece> pieces = {{s, 0}};
  p.pre_tokenize(pieces);
  Strings out;
  for (const Piece& x : pieces) out.push_back(x.text);
  return out;
}

TEST(PreTokenizers, Bert) {
  EXPECT_EQ(run(BertPreTokenizer(), "Hey friend!  How are you?!"),
            (Strings{"Hey", "friend", "!", "How", "are", "you", "?", "!"}));
  EXPECT_EQ(run(BertPreTokenizer(), "a\xE3\x80\x82" "b"), (Strings{"a", "\xE3\x80\x82", "b"}));  // "。" is Po
}

TEST(PreTokenizers, ByteLevel) {
  auto p = ByteLevelPreTokenizer::create(false, true);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(run(**p, "Hello my friend, how's it?"),
            (Strings{"Hello", "Ġmy", "Ġfriend", ",", "Ġhow", "'s", "Ġit", "?"}));
  // \s+(?!\S): the last space of a run goes with the next word.
  EXPECT_EQ(run(**p, "a   b\n"), (Strings{"a", "ĠĠ", "Ġb", "Ċ"}));
  auto q = ByteLevelPreTokenizer::create(true, false);
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(run(**q, "Hi there"), (Strings{"ĠHiĠthere"}));
  EXPECT_EQ(run(**q, "é"), (Strings{"ĠÃ©"}));
}

TEST(PreTokenizers, SplitWithLlama3Regex) {
  auto r = Regex::compile(
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+");
  ASSERT_TRUE(r.has_value()) << r.status().to_string();
  SplitPreTokenizer p(*r, SplitBehavior::isolated, false);
  EXPECT_EQ(run(p, "I'M 12345 done!!\n\nok"), (Strings{"I", "'M", " ", "123", "45", " done", "!!\n\n", "ok"}));
}

TEST(PreTokenizers, SplitBehaviors) {
  auto dash = Regex::literal("-");
  ASSERT_TRUE(dash.has_value());
  const std::string s = "the-final--countdown";
  EXPECT_EQ(run(SplitPreTokenizer(*dash, SplitBehavior::removed, false), s), (Strings{"the", "final", "countdown"}));
  EXPECT_EQ(run(SplitPreTokenizer(*dash, SplitBehavior::isolated, false), s),
            (Strings{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(run(SplitPreTokenizer(*dash, SplitBehavior::merged_with_previous, false), s),
            (Strings{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(run(SplitPreTokenizer(*dash, SplitBehavior::merged_with_next, false), s),
            (Strings{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(run(SplitPreTokenizer(*dash, SplitBehavior::contiguous, false), s),
            (Strings{"the", "-", "final", "--", "countdown"}));
  // invert: the matches are the content, the rest the delimiters.
  auto word = Regex::compile("\\w+");
  ASSERT_TRUE(word.has_value());
  EXPECT_EQ(run(SplitPreTokenizer(*word, SplitBehavior::removed, true), "hi, there"), (Strings{"hi", "there"}));
}

TEST(PreTokenizers, MetaspaceSchemesAndSplit) {
  const std::string u = "\xE2\x96\x81";
  EXPECT_EQ(run(MetaspacePreTokenizer(u, PrependScheme::always, true), "Hey friend"),
            (Strings{u + "Hey", u + "friend"}));
  EXPECT_EQ(run(MetaspacePreTokenizer(u, PrependScheme::never, false), "Hey  friend"), (Strings{"Hey" + u + u + "friend"}));
  // "first" prepends to the piece at offset 0 only.
  std::vector<Piece> pieces = {{"a b", 0}, {"c", 5}};
  MetaspacePreTokenizer(u, PrependScheme::first, false).pre_tokenize(pieces);
  EXPECT_EQ(pieces[0].text, u + "a" + u + "b");
  EXPECT_EQ(pieces[1].text, "c");
}

TEST(PreTokenizers, DigitsPunctuationWhitespace) {
  EXPECT_EQ(run(DigitsPreTokenizer(true), "a123b"), (Strings{"a", "1", "2", "3", "b"}));
  EXPECT_EQ(run(DigitsPreTokenizer(false), "a123b45"), (Strings{"a", "123", "b", "45"}));
  EXPECT_EQ(run(PunctuationPreTokenizer(SplitBehavior::isolated), "Hey!? you"), (Strings{"Hey", "!", "?", " you"}));
  auto ws = WhitespacePreTokenizer::create();
  ASSERT_TRUE(ws.has_value());
  EXPECT_EQ(run(**ws, "Hey man!! How's it going?"),
            (Strings{"Hey", "man", "!!", "How", "'", "s", "it", "going", "?"}));
  EXPECT_EQ(run(WhitespaceSplitPreTokenizer(), " Hey  man!\tok\n"), (Strings{"Hey", "man!", "ok"}));
  EXPECT_EQ(run(CharDelimiterSplitPreTokenizer(U'x'), "axbxxc"), (Strings{"a", "b", "c"}));
}

TEST(PreTokenizers, Sequence) {
  std::vector<std::unique_ptr<PreTokenizer>> steps;
  steps.push_back(std::make_unique<WhitespaceSplitPreTokenizer>());
  steps.push_back(std::make_unique<DigitsPreTokenizer>(true));
  EXPECT_EQ(run(SequencePreTokenizer(std::move(steps)), "ab12 c3"), (Strings{"ab", "1", "2", "c", "3"}));
}

TEST(PreTokenizers, ByteAlphabetIsABijection) {
  const auto& table = byte_to_unicode();
  EXPECT_EQ(table[' '], "Ġ");
  EXPECT_EQ(table['\n'], "Ċ");
  EXPECT_EQ(table['A'], "A");
  EXPECT_EQ(unicode_to_byte(U'Ġ'), ' ');
  EXPECT_EQ(unicode_to_byte(U'中'), -1);
}

}  // namespace
}  // namespace prism::text
