// NgramDrafter (prompt lookup) and make_drafter.
#include "engines/generate/speculation.h"

#include <gtest/gtest.h>

#include <vector>

namespace prism::engines::generate {
namespace {

using Ids = std::vector<int32_t>;

TEST(NgramDrafter, ProposesWhatFollowedTheLastOccurrenceOfTheSuffix) {
  NgramDrafter d(1, 3);
  // Suffix [7 8 9] occurred at 1; what followed: 4 5 6 7 8.
  const Ids tokens = {1, 7, 8, 9, 4, 5, 6, 7, 8, 9};
  EXPECT_EQ(d.propose(tokens, 3), (Ids{4, 5, 6}));
  EXPECT_EQ(d.propose(tokens, 10), (Ids{4, 5, 6, 7, 8, 9}));  // up to the end of the sequence
  EXPECT_EQ(d.propose(tokens, 0), Ids{});
}

TEST(NgramDrafter, PrefersTheLongestMatchThenTheMostRecent) {
  NgramDrafter d(1, 3);
  // 3-gram [1 2 3] occurs at 0 (then 10); 1-gram [3] also occurs at 6 (then 20), more recent.
  const Ids tokens = {1, 2, 3, 10, 11, 0, 3, 20, 21, 1, 2, 3};
  EXPECT_EQ(d.propose(tokens, 2), (Ids{10, 11}));
  NgramDrafter unigram(1, 1);
  EXPECT_EQ(unigram.propose(tokens, 2), (Ids{20, 21}));
  // The most recent of several occurrences of the same n-gram.
  const Ids repeated = {5, 6, 1, 5, 6, 2, 5, 6};
  EXPECT_EQ(NgramDrafter(2, 2).propose(repeated, 1), (Ids{2}));
}

TEST(NgramDrafter, FallsBackToShorterNgramsDownToTheMinimum) {
  const Ids tokens = {4, 9, 8, 7, 6, 9};  // [7 6 9], [6 9] never occurred before; [9] did
  EXPECT_EQ(NgramDrafter(1, 3).propose(tokens, 2), (Ids{8, 7}));
  EXPECT_EQ(NgramDrafter(2, 3).propose(tokens, 2), Ids{});
}

TEST(NgramDrafter, ShortAndSelfOverlappingSequences) {
  NgramDrafter d(1, 3);
  EXPECT_EQ(d.propose(Ids{}, 4), Ids{});
  EXPECT_EQ(d.propose(Ids{5}, 4), Ids{});
  EXPECT_EQ(d.propose(Ids{5, 5}, 4), (Ids{5}));
  // All the same token: the 3-gram at 1 is the most recent earlier one; one token follows.
  EXPECT_EQ(d.propose(Ids{5, 5, 5, 5, 5}, 4), (Ids{5}));
  // A period-2 pattern continues.
  EXPECT_EQ(d.propose(Ids{1, 2, 1, 2, 1, 2}, 4), (Ids{1, 2}));
}

TEST(MakeDrafter, NoneNgramAndErrors) {
  auto none = make_drafter("none", 1, 3);
  ASSERT_TRUE(none.has_value());
  EXPECT_EQ(none->get(), nullptr);
  auto ngram = make_drafter("ngram", 2, 4);
  ASSERT_TRUE(ngram.has_value());
  ASSERT_NE(ngram->get(), nullptr);
  EXPECT_EQ((*ngram)->propose(Ids{1, 2, 3, 1, 2}, 5), (Ids{3, 1, 2}));
  auto bad_kind = make_drafter("eagle", 1, 3);
  ASSERT_FALSE(bad_kind.has_value());
  EXPECT_EQ(bad_kind.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(bad_kind.status().message().find("eagle"), std::string::npos);
  EXPECT_FALSE(make_drafter("ngram", 0, 3).has_value());
  EXPECT_FALSE(make_drafter("ngram", 3, 2).has_value());
}

}  // namespace
}  // namespace prism::engines::generate
