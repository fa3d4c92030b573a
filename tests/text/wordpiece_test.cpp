// WordPiece model: HF's greedy longest-match-first on hand-made vocabularies, against a naive
// reference (every end tried from the word's end) on random ones, and on bert-base-uncased's
// real vocab.txt with pieces checked line by line.
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "test_util/paths.h"
#include "text/token_model.h"

namespace prism::text {
namespace {

using Ids = std::vector<TokenId>;

std::unique_ptr<TokenModel> make(WordPieceConfig config) {
  auto model = make_wordpiece(std::move(config));
  EXPECT_TRUE(model.has_value()) << model.status().to_string();
  return model.has_value() ? std::move(model).value() : nullptr;
}

Ids run(const TokenModel& model, std::string_view word) {
  Ids out = {-7};  // tokenize appends: the sentinel must survive
  model.tokenize(word, out);
  EXPECT_EQ(out.front(), -7);
  return Ids(out.begin() + 1, out.end());
}

WordPieceConfig small_config() {
  WordPieceConfig c;
  const char* tokens[] = {"[UNK]", "un", "##aff", "##able", "a", "##a", "##b", "é", "##é", "aff", "##ff", "##affa"};
  for (int i = 0; i < 12; ++i) c.vocab.emplace_back(tokens[i], i);
  return c;
}

TEST(WordPiece, GreedyLongestMatchFirst) {
  auto m = make(small_config());
  EXPECT_EQ(run(*m, "unaff"), Ids({1, 2}));
  // Greedy, no backtracking: "##affa" wins and leaves "ble", so the whole word is unk even
  // though un ##aff ##able would spell it.
  EXPECT_EQ(run(*m, "unaffable"), Ids({0}));
  EXPECT_EQ(run(*m, "aaab"), Ids({4, 5, 5, 6}));
  EXPECT_EQ(run(*m, "aaffa"), Ids({4, 11}));  // "##affa" beats "##aff" + "##a"
  EXPECT_EQ(run(*m, "éé"), Ids({7, 8}));
  EXPECT_EQ(run(*m, ""), Ids());
}

TEST(WordPiece, AnyUnmatchedPositionMakesTheWholeWordUnk) {
  auto m = make(small_config());
  EXPECT_EQ(run(*m, "unaffablex"), Ids({0}));
  EXPECT_EQ(run(*m, "x"), Ids({0}));
  EXPECT_EQ(run(*m, "b"), Ids({0}));  // only "##b" exists
}

TEST(WordPiece, MaxInputCharsCountsCharactersNotBytes) {
  WordPieceConfig c = small_config();
  c.max_input_chars_per_word = 3;
  auto m = make(c);
  EXPECT_EQ(run(*m, "ééé"), Ids({7, 8, 8}));  // 6 bytes, 3 chars: allowed
  EXPECT_EQ(run(*m, "aaaa"), Ids({0}));
}

TEST(WordPiece, ConfigAndLookups) {
  WordPieceConfig c = small_config();
  c.unk_token = "<unk>";
  EXPECT_FALSE(make_wordpiece(c).has_value());
  c = small_config();
  c.vocab.emplace_back("un", 40);
  EXPECT_FALSE(make_wordpiece(c).has_value());
  auto m = make(small_config());
  EXPECT_EQ(m->vocab_size(), 12);
  EXPECT_EQ(m->token_to_id("##able"), 3);
  EXPECT_EQ(m->id_to_token(2), "##aff");
  EXPECT_EQ(m->id_to_token(-1), "");
}

// Naive reference: HF's loop as written, every end from the word's end back.
Ids naive_wordpiece(const std::string& w, const std::map<std::string, TokenId>& vocab, TokenId unk) {
  Ids out;
  size_t start = 0;
  while (start < w.size()) {
    size_t end = w.size();
    bool found = false;
    while (start < end) {
      std::string sub = (start > 0 ? "##" : "") + w.substr(start, end - start);
      if (auto it = vocab.find(sub); it != vocab.end()) {
        out.push_back(it->second);
        found = true;
        break;
      }
      --end;  // ASCII alphabet below: one byte is one character
    }
    if (!found) return {unk};
    start = end;
  }
  return out;
}

TEST(WordPiece, MatchesNaiveReferenceOnRandomVocabularies) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 30; ++trial) {
    std::map<std::string, TokenId> vocab = {{"[UNK]", 0}};
    for (int i = 0; i < 40; ++i) {
      std::string t = rng() % 2 ? "##" : "";
      int len = 1 + static_cast<int>(rng() % 4);
      for (int k = 0; k < len; ++k) t += static_cast<char>('a' + rng() % 3);
      vocab.emplace(t, static_cast<TokenId>(vocab.size()));
    }
    WordPieceConfig c;
    c.vocab.assign(vocab.begin(), vocab.end());
    auto m = make(c);
    for (int k = 0; k < 100; ++k) {
      std::string w;
      int len = 1 + static_cast<int>(rng() % 12);
      for (int i = 0; i < len; ++i) w += static_cast<char>('a' + rng() % 3);
      ASSERT_EQ(run(*m, w), naive_wordpiece(w, vocab, 0)) << w;
    }
  }
}

TEST(WordPieceBert, RealVocabulary) {
  WordPieceConfig c;
  std::ifstream in(test::testdata_dir() + "/tokenizers/bert-uncased/vocab.txt");
  std::string line;
  while (std::getline(in, line)) c.vocab.emplace_back(line, static_cast<TokenId>(c.vocab.size()));
  ASSERT_EQ(c.vocab.size(), 30522u);
  auto m = make(c);
  ASSERT_NE(m, nullptr);
  // Ids are vocab.txt line indices (0-based), each checked against the file.
  EXPECT_EQ(run(*m, "the"), Ids({1996}));
  EXPECT_EQ(run(*m, "hello"), Ids({7592}));
  EXPECT_EQ(run(*m, "unaffable"), Ids({14477, 20961, 3468}));        // una ##ffa ##ble
  EXPECT_EQ(run(*m, "tokenization"), Ids({19204, 3989}));            // token ##ization
  EXPECT_EQ(run(*m, "embeddings"), Ids({7861, 8270, 4667, 2015}));    // em ##bed ##ding ##s
  EXPECT_EQ(run(*m, "xyzzyq"), Ids({1060, 2100, 28753, 4160}));       // x ##y ##zzy ##q
  EXPECT_EQ(run(*m, "日本"), Ids({1864, 30402}));                     // 日 ##本
  EXPECT_EQ(run(*m, "supercalifragilisticexpialidocious"),
            Ids({3565, 9289, 10128, 29181, 24411, 4588, 10288, 19312, 21273, 10085, 6313}));
  EXPECT_EQ(run(*m, "café"), Ids({100}));  // "##é" is not in the uncased vocab
  EXPECT_EQ(run(*m, std::string(101, 'a')), Ids({100}));
  EXPECT_EQ(run(*m, "[UNK]"), Ids({100}));
  EXPECT_EQ(m->id_to_token(7592), "hello");
}

}  // namespace
}  // namespace prism::text
