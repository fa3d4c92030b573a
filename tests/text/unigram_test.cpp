// Unigram model: Viterbi checked against exhaustive search over every segmentation of short
// strings, unk fusion and byte fallback as HF does them, and libsentencepiece itself as the
// oracle on unigram models it trains here from a small synthetic corpus.
#include <sentencepiece_processor.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "test_util/spm_to_json.h"
#include "text/token_model.h"

namespace prism::text {
namespace {

using Ids = std::vector<TokenId>;

std::unique_ptr<TokenModel> make(UnigramConfig config) {
  auto model = make_unigram(std::move(config));
  EXPECT_TRUE(model.has_value()) << model.status().to_string();
  return model.has_value() ? std::move(model).value() : nullptr;
}

Ids run(const TokenModel& model, std::string_view piece) {
  Ids out;
  model.tokenize(piece, out);
  return out;
}

TEST(Unigram, PicksTheBestScoringSegmentation) {
  UnigramConfig c;
  c.vocab = {{"<unk>", 0.0}, {"a", -1.0}, {"b", -1.0}, {"ab", -1.5}, {"abc", -4.0}, {"c", -1.0}, {"bc", -0.5}};
  c.unk_id = 0;
  auto m = make(c);
  EXPECT_EQ(run(*m, "ab"), Ids({3}));        // -1.5 beats a+b = -2
  EXPECT_EQ(run(*m, "abc"), Ids({1, 6}));    // a+bc = -1.5 beats ab+c = -2.5 and abc = -4
  EXPECT_EQ(run(*m, ""), Ids());
  EXPECT_EQ(m->vocab_size(), 7);
  EXPECT_EQ(m->id_to_token(6), "bc");
  EXPECT_EQ(m->token_to_id("abc"), 4);
}

TEST(Unigram, UnknownCharactersFuseIntoOneUnk) {
  UnigramConfig c;
  c.vocab = {{"<unk>", 0.0}, {"a", -1.0}, {"b", -2.0}};
  c.unk_id = 0;
  auto m = make(c);
  EXPECT_EQ(run(*m, "axyb"), Ids({1, 0, 2}));
  EXPECT_EQ(run(*m, "x\xC3\xA9" "a"), Ids({0, 1}));
  EXPECT_EQ(run(*m, "xax"), Ids({0, 1, 0}));
}

TEST(Unigram, ByteFallbackSpellsUnknownsAsBytes) {
  UnigramConfig c;
  c.vocab = {{"<unk>", 0.0}, {"a", -1.0}, {"<0x78>", 0.0}, {"<0xC3>", 0.0}, {"<0xA9>", 0.0}};
  c.unk_id = 0;
  c.byte_fallback = true;
  auto m = make(c);
  EXPECT_EQ(run(*m, "ax\xC3\xA9"), Ids({1, 2, 3, 4}));  // fused "xé" spelled byte by byte
  EXPECT_EQ(run(*m, "az"), Ids({1, 0}));                // <0x7A> missing -> unk
  EXPECT_EQ(run(*m, "<0x78>"), Ids({2}));               // like HF, every vocab string matches
}

TEST(Unigram, RejectsBadConfigs) {
  UnigramConfig c;
  EXPECT_FALSE(make_unigram(c).has_value());
  c.vocab = {{"a", -1.0}, {"a", -2.0}};
  EXPECT_FALSE(make_unigram(c).has_value());
  c.vocab = {{"a", -1.0}};
  c.unk_id = 3;
  EXPECT_FALSE(make_unigram(c).has_value());
}

// Exhaustive reference: the best total over every segmentation at character boundaries,
// where a segment is a vocabulary piece, or a single character that no one-character piece
// covers (scored min_score - 10, as HF and SentencePiece do).
double brute_best(const std::vector<std::string>& chars, size_t from, const std::map<std::string, double>& vocab,
                  double unk_score) {
  if (from == chars.size()) return 0.0;
  double best = -INFINITY;
  std::string s;
  for (size_t to = from; to < chars.size(); ++to) {
    s += chars[to];
    auto it = vocab.find(s);
    double seg = it != vocab.end() ? it->second : (to == from ? unk_score : -INFINITY);
    if (seg == -INFINITY) continue;
    best = std::max(best, seg + brute_best(chars, to + 1, vocab, unk_score));
  }
  return best;
}

TEST(Unigram, ViterbiMatchesExhaustiveSearch) {
  std::mt19937 rng(11);
  const std::vector<std::string> alphabet = {"a", "b", "c", "\xC3\xA9", "d"};  // "d" is never a piece
  std::uniform_real_distribution<double> score(-8.0, -0.1);
  for (int trial = 0; trial < 40; ++trial) {
    std::map<std::string, double> vocab;
    UnigramConfig c;
    c.vocab.emplace_back("<unk>", 0.0);
    c.unk_id = 0;
    for (int i = 0; i < 30; ++i) {
      std::string t;
      int len = 1 + static_cast<int>(rng() % 4);
      for (int k = 0; k < len; ++k) t += alphabet[rng() % 4];
      if (vocab.emplace(t, score(rng)).second) c.vocab.emplace_back(t, vocab[t]);
    }
    double min_score = 0.0;  // "<unk>" at 0 takes part, as in HF
    for (auto& [t, s] : c.vocab) min_score = std::min(min_score, s);
    auto m = make(c);
    for (int k = 0; k < 60; ++k) {
      std::vector<std::string> chars;
      std::string text;
      int len = 1 + static_cast<int>(rng() % 9);
      for (int i = 0; i < len; ++i) chars.push_back(alphabet[rng() % alphabet.size()]), text += chars.back();
      Ids ids = run(*m, text);
      // Score of our answer: its pieces, plus unk_score for each character no piece covers.
      double got = 0.0;
      size_t covered = 0;
      for (TokenId id : ids) {
        if (id == 0) continue;
        std::string piece(m->id_to_token(id));
        got += vocab.at(piece);
        for (unsigned char ch : piece) covered += (ch & 0xC0) != 0x80;
      }
      got += static_cast<double>(chars.size() - covered) * (min_score - 10.0);
      ASSERT_NEAR(got, brute_best(chars, 0, vocab, min_score - 10.0), 1e-9) << text;
    }
  }
}

// ---- libsentencepiece as the oracle, on unigram models it trains here ----

std::vector<std::string> random_sentences(uint32_t seed, int n) {
  const std::vector<std::string> words = {
      "the",  "a",      "tokenizer", "model",  "unigram", "piece", "sentence", "score", "viterbi", "lattice",
      "café", "naïve",  "über",      "straße", "東京",    "日本語", "の",        "😀",     "123",     "4567",
      "of",   "in",     "running",   "runner", "ran",     "un",    "believable", "x",    "zq",      "éé"};
  std::mt19937 rng(seed);
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    std::string s;
    int len = 1 + static_cast<int>(rng() % 12);
    for (int k = 0; k < len; ++k) s += (k ? " " : "") + words[rng() % words.size()];
    out.push_back(s);
  }
  return out;
}

std::string spm_normalize(std::string_view text) {  // identity rules, dummy prefix, "▁" for " "
  std::string out = "\xE2\x96\x81";
  for (char ch : text) {
    if (ch == ' ') out += "\xE2\x96\x81";
    else out += ch;
  }
  return out;
}

void check_against_sentencepiece(bool byte_fallback) {
  std::vector<std::string> train = random_sentences(5, 3000);
  std::string args =
      "--model_type=unigram --normalization_rule_name=identity --vocab_size=" +
      std::string(byte_fallback ? "420" : "150") +  // byte fallback reserves 256 pieces
      " "
      "--remove_extra_whitespaces=false --character_coverage=0.995 --hard_vocab_limit=false "
      "--num_threads=1 --minloglevel=2 --byte_fallback=" + std::string(byte_fallback ? "true" : "false");
  auto proto = test::train_sentencepiece(train, args);
  ASSERT_TRUE(proto.has_value()) << proto.status().to_string();
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.LoadFromSerializedProto(*proto).ok());

  UnigramConfig c;  // as HF's converter: every piece with its score, id = index
  for (int id = 0; id < sp.GetPieceSize(); ++id) c.vocab.emplace_back(sp.IdToPiece(id), sp.GetScore(id));
  c.unk_id = sp.unk_id();
  c.byte_fallback = byte_fallback;
  auto m = make(c);
  ASSERT_NE(m, nullptr);

  std::vector<std::string> corpus = random_sentences(99, 1500);
  // Characters outside the training data exercise unk (fused) and byte fallback.
  for (const char* s : {"Ωmega ΩΩ unknown", "東京 café ß ∑∑∑", "  two  spaces ", "the\tmodel\nq", "zzzzqqqq"})
    corpus.push_back(s);
  int identical = 0;
  for (const std::string& text : corpus) {
    std::vector<int> expected;
    ASSERT_TRUE(sp.Encode(text, &expected).ok());
    Ids got = run(*m, spm_normalize(text));
    EXPECT_EQ(got, Ids(expected.begin(), expected.end())) << "text: " << text;
    identical += got == Ids(expected.begin(), expected.end());
  }
  std::printf("[ info ] unigram (byte_fallback=%d, %d pieces): %d of %zu identical to libsentencepiece\n",
              byte_fallback, sp.GetPieceSize(), identical, corpus.size());
}

TEST(UnigramSentencePiece, IdenticalToSentencePiece) { check_against_sentencepiece(false); }
TEST(UnigramSentencePiece, IdenticalToSentencePieceWithByteFallback) { check_against_sentencepiece(true); }

}  // namespace
}  // namespace prism::text
