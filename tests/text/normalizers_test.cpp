// Normalizer components on their own, expected outputs derived by hand from HF semantics.
#include <gtest/gtest.h>

#include "text/normalizers.h"

namespace prism::text {
namespace {

std::string run(const Normalizer& n, std::string s) {
  n.normalize(s);
  return s;
}

TEST(Normalizers, Lowercase) {
  EXPECT_EQ(run(LowercaseNormalizer(), "HeLLo ÀÉÎ ΣΑΣ İ"), "hello àéî σασ i\xCC\x87");
}

TEST(Normalizers, UnicodeForms) {
  const std::string composed = "\xC3\xA9", decomposed = "e\xCC\x81";  // é
  EXPECT_EQ(run(UnicodeNormalizer(UnicodeForm::nfd), composed), decomposed);
  EXPECT_EQ(run(UnicodeNormalizer(UnicodeForm::nfc), decomposed), composed);
  // NFKC folds compatibility characters: the "ﬁ" ligature and full-width "Ａ".
  EXPECT_EQ(run(UnicodeNormalizer(UnicodeForm::nfkc), "\xEF\xAC\x81 \xEF\xBC\xA1"), "fi A");
  EXPECT_EQ(run(UnicodeNormalizer(UnicodeForm::nfkd), "\xEF\xAC\x81\xC3\xA9"), "fie\xCC\x81");
}

TEST(Normalizers, StripAccentsDropsCombiningMarksOnly) {
  EXPECT_EQ(run(StripAccentsNormalizer(), "e\xCC\x81\xC3\xA9"), "e\xC3\xA9");  // needs NFD before it
}

TEST(Normalizers, BertNormalizer) {
  BertNormalizerConfig c;  // clean_text, chinese chars, strip_accents null, lowercase
  // Controls dropped, \t \n -> ' ', CJK spaced, accents stripped (lowercase on), lowercased.
  EXPECT_EQ(run(BertNormalizer(c), "H\x01\xC3\xA9llo\tW\norld\xE4\xB8\xAD!"), "hello w orld \xE4\xB8\xAD !");
  c.lowercase = false;  // strip_accents follows lowercase: accents kept
  EXPECT_EQ(run(BertNormalizer(c), "Caf\xC3\xA9"), "Caf\xC3\xA9");
  c.strip_accents = true;
  EXPECT_EQ(run(BertNormalizer(c), "Caf\xC3\xA9"), "Cafe");
  c.clean_text = false;
  c.handle_chinese_chars = false;
  EXPECT_EQ(run(BertNormalizer(c), "a\tb\xE4\xB8\xAD"), "a\tb\xE4\xB8\xAD");
}

TEST(Normalizers, ReplacePrependStripSequence) {
  auto space = Regex::literal(" ");
  ASSERT_TRUE(space.has_value());
  EXPECT_EQ(run(ReplaceNormalizer(*space, "\xE2\x96\x81"), "a b  c"), "a\xE2\x96\x81" "b\xE2\x96\x81\xE2\x96\x81" "c");
  auto digits = Regex::compile("\\d+");
  ASSERT_TRUE(digits.has_value());
  EXPECT_EQ(run(ReplaceNormalizer(*digits, "#"), "a12b3"), "a#b#");
  EXPECT_EQ(run(PrependNormalizer("\xE2\x96\x81"), "hi"), "\xE2\x96\x81hi");
  EXPECT_EQ(run(PrependNormalizer("\xE2\x96\x81"), ""), "");
  EXPECT_EQ(run(StripNormalizer(true, true), " \t hi there \xE3\x80\x80"), "hi there");
  EXPECT_EQ(run(StripNormalizer(false, true), "  hi  "), "  hi");
  std::vector<std::unique_ptr<Normalizer>> steps;
  steps.push_back(std::make_unique<UnicodeNormalizer>(UnicodeForm::nfd));
  steps.push_back(std::make_unique<StripAccentsNormalizer>());
  steps.push_back(std::make_unique<LowercaseNormalizer>());
  EXPECT_EQ(run(SequenceNormalizer(std::move(steps)), "ÉCOLE"), "ecole");
}

}  // namespace
}  // namespace prism::text
