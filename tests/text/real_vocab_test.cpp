// The tokenizer on real vocabularies (../shared/testdata/tokenizers): BERT uncased (vocab.txt
// and tokenizer.json), all-MiniLM-L6-v2 (truncation + padding), GPT-2 (vocab.json + merges.txt
// and tokenizer.json). Expected ids are read off the vocab files (id = line / JSON value).
#include <gtest/gtest.h>

#include <random>

#include "test_util/paths.h"
#include "text/tokenizer.h"

namespace prism::text {
namespace {

using Ids = std::vector<TokenId>;

std::string tok_dir(const std::string& name) { return test::testdata_dir() + "/tokenizers/" + name; }

Tokenizer load(const std::string& path) {
  auto t = Tokenizer::load(path);
  EXPECT_TRUE(t.has_value()) << t.status().to_string();
  return std::move(t).value();
}

std::string decode(const Tokenizer& t, const Ids& ids, bool skip = false) {
  auto s = t.decode(ids, skip);
  EXPECT_TRUE(s.has_value()) << s.status().to_string();
  return s.has_value() ? *s : "";
}

const std::vector<std::string>& corpus() {
  static const std::vector<std::string> c = {
      "Hello, world!",
      "The quick brown fox jumps over the lazy dog.",
      "Héllo Wörld, naïve café résumé",
      "Don't you think it's 3.14159 or 2,718?",
      "你好，世界！这是一个测试。",
      "Emoji: 😀🎉👍🏽 and ZWJ 👨‍👩‍👧",
      "Mixed Ελληνικά русский العربية हिन्दी 日本語",
      "   leading and   multiple    spaces\t\ttabs\nnewlines\r\n",
      "1234567890 000111 3.5e10 ½ ³",
      "combining: e\xCC\x81 a\xCC\x88 n\xCC\x83",
      "",
      "[CLS] inside text [SEP] and <|endoftext|> too",
      "unaffable unbelievable tokenization WordPiece",
  };
  return c;
}

TEST(BertRealVocab, HelloWorld) {
  Tokenizer t = load(tok_dir("bert-uncased"));
  EXPECT_EQ(t.encode("Hello, world!").ids, (Ids{101, 7592, 1010, 2088, 999, 102}));
  EXPECT_EQ(t.encode("Hello, world!", false).ids, (Ids{7592, 1010, 2088, 999}));
  EXPECT_EQ(t.special_token_ids().cls, 101);
  EXPECT_EQ(t.special_token_ids().sep, 102);
  EXPECT_EQ(t.special_token_ids().pad, 0);
  EXPECT_EQ(t.special_token_ids().unk, 100);
  EXPECT_EQ(t.token_to_id("the"), 1996);
  EXPECT_EQ(t.id_to_token(7592), "hello");
  EXPECT_EQ(t.vocab_size(), 30522);
}

TEST(BertRealVocab, AccentsCjkUnknownAndSpecials) {
  Tokenizer t = load(tok_dir("bert-uncased"));
  // Accents stripped, lowercased: "héllo" == "hello".
  EXPECT_EQ(t.encode("HÉLLO", false).ids, (Ids{7592}));
  // CJK ideographs are isolated one by one.
  // (vocab.txt lines 1865 and 1877, 1-based: ids 1864 and 1876.)
  EXPECT_EQ(t.encode("日本", false).ids, (Ids{1864, 1876}));
  // "你" is not in this vocab: [UNK].
  EXPECT_EQ(t.encode("你日", false).ids, (Ids{100, 1864}));
  // An emoji is not in the vocab: [UNK].
  EXPECT_EQ(t.encode("😀", false).ids, (Ids{100}));
  // Special tokens typed in the text are matched whole, before normalisation.
  EXPECT_EQ(t.encode("[CLS] hello [SEP]", false).ids, (Ids{101, 7592, 102}));
  // Pair: [CLS] a [SEP] b [SEP], type ids 0.. then 1..
  const Encoding pair = t.encode_pair("hello", "world");
  EXPECT_EQ(pair.ids, (Ids{101, 7592, 102, 2088, 102}));
  EXPECT_EQ(pair.type_ids, (std::vector<int32_t>{0, 0, 0, 1, 1}));
  EXPECT_EQ(pair.special_tokens_mask, (std::vector<uint8_t>{1, 0, 1, 0, 1}));
}

TEST(BertRealVocab, VocabTxtAndTokenizerJsonAgree) {
  Tokenizer from_json = load(tok_dir("bert-uncased") + "/tokenizer.json");
  Tokenizer from_txt = load(tok_dir("bert-uncased") + "/vocab.txt");
  for (const std::string& s : corpus()) {
    EXPECT_EQ(from_json.encode(s).ids, from_txt.encode(s).ids) << s;
    EXPECT_EQ(from_json.encode_pair(s, "and more").ids, from_txt.encode_pair(s, "and more").ids) << s;
  }
}

TEST(BertRealVocab, RoundTripIsNormalisedText) {
  Tokenizer t = load(tok_dir("bert-uncased"));
  const std::pair<const char*, const char*> cases[] = {
      {"Hello, World!", "hello, world!"},
      {"Héllo Wörld, naïve café", "hello world, naive cafe"},
      // HF's cleanup runs token by token, so " ' " never matches: "it ' s" stays.
      {"It's a TEST.", "it ' s a test."},
      {"日本", "日 本"},
      {"  spaced\t\tout  ", "spaced out"},
  };
  for (const auto& [in, out] : cases) EXPECT_EQ(decode(t, t.encode(in).ids, true), out) << in;
  EXPECT_EQ(decode(t, t.encode("hello").ids, false), "[CLS] hello [SEP]");
}

TEST(MiniLmRealVocab, TruncationAndPaddingFromTokenizerJson) {
  Tokenizer t = load(tok_dir("all-MiniLM-L6-v2"));
  ASSERT_TRUE(t.truncation().has_value());
  EXPECT_EQ(t.truncation()->max_length, 128u);
  ASSERT_TRUE(t.padding().has_value());
  EXPECT_EQ(t.padding()->strategy, PaddingStrategy::fixed);

  const Encoding short_e = t.encode("Hello, world!");
  ASSERT_EQ(short_e.size(), 128u);
  EXPECT_EQ(Ids(short_e.ids.begin(), short_e.ids.begin() + 7), (Ids{101, 7592, 1010, 2088, 999, 102, 0}));
  EXPECT_EQ(short_e.ids.back(), 0);
  EXPECT_EQ(short_e.attention_mask[5], 1);
  EXPECT_EQ(short_e.attention_mask[6], 0);

  std::string long_text;
  for (int i = 0; i < 300; ++i) long_text += "hello ";
  const Encoding long_e = t.encode(long_text);
  ASSERT_EQ(long_e.size(), 128u);
  EXPECT_EQ(long_e.ids.front(), 101);
  EXPECT_EQ(long_e.ids.back(), 102);  // room was kept for [SEP]
  EXPECT_EQ(long_e.ids[126], 7592);
  for (uint8_t m : long_e.attention_mask) EXPECT_EQ(m, 1);

  // Overrides: left truncation keeps the end; batch-longest padding pads to the longest.
  TruncationConfig left;
  left.max_length = 5;
  left.direction = Direction::left;
  t.set_truncation(left);
  PaddingConfig batch;
  batch.pad_id = 0;
  t.set_padding(batch);
  const auto out = t.encode_batch({"one two three four five", "hello"});
  EXPECT_EQ(out[0].ids, (Ids{101, *t.token_to_id("three"), *t.token_to_id("four"), *t.token_to_id("five"), 102}));
  EXPECT_EQ(out[1].ids, (Ids{101, 7592, 102, 0, 0}));
  EXPECT_EQ(out[1].attention_mask, (std::vector<uint8_t>{1, 1, 1, 0, 0}));
}

TEST(Gpt2RealVocab, KnownIdsAndSpecialToken) {
  Tokenizer t = load(tok_dir("gpt2"));
  EXPECT_EQ(t.encode("Hello world").ids, (Ids{15496, 995}));
  EXPECT_EQ(t.encode("Hello world<|endoftext|>").ids, (Ids{15496, 995, 50256}));
  EXPECT_EQ(t.encode("\n").ids, (Ids{198}));
  EXPECT_EQ(decode(t, {15496, 995, 50256}, true), "Hello world");
  EXPECT_EQ(decode(t, {15496, 995, 50256}, false), "Hello world<|endoftext|>");
  EXPECT_EQ(t.special_token_ids().eos, 50256);
  EXPECT_FALSE(t.decode(Ids{50257}).has_value());
}

TEST(Gpt2RealVocab, RoundTripsArbitraryText) {
  Tokenizer t = load(tok_dir("gpt2"));
  for (const std::string& s : corpus()) EXPECT_EQ(decode(t, t.encode(s).ids), s) << s;
  // Random code points from many scripts, whitespace runs and digits.
  std::mt19937 rng(7);
  const char32_t ranges[][2] = {{0x20, 0x7E}, {0xA0, 0x24F}, {0x370, 0x3FF}, {0x400, 0x4FF}, {0x600, 0x6FF},
                                {0x900, 0x97F}, {0x3040, 0x30FF}, {0x4E00, 0x9FFF}, {0xAC00, 0xD7A3}, {0x1F300, 0x1F64F}};
  for (int trial = 0; trial < 50; ++trial) {
    std::u32string cps;
    for (int i = 0; i < 60; ++i) {
      const auto& r = ranges[rng() % 10];
      cps.push_back(rng() % 5 == 0 ? U' ' : static_cast<char32_t>(r[0] + rng() % (r[1] - r[0] + 1)));
    }
    std::string s;
    for (char32_t c : cps) {
      if (c < 0x80) s.push_back(static_cast<char>(c));
      else if (c < 0x800) s += {static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))};
      else if (c < 0x10000) s += {static_cast<char>(0xE0 | (c >> 12)), static_cast<char>(0x80 | ((c >> 6) & 0x3F)), static_cast<char>(0x80 | (c & 0x3F))};
      else s += {static_cast<char>(0xF0 | (c >> 18)), static_cast<char>(0x80 | ((c >> 12) & 0x3F)), static_cast<char>(0x80 | ((c >> 6) & 0x3F)), static_cast<char>(0x80 | (c & 0x3F))};
    }
    ASSERT_EQ(decode(t, t.encode(s).ids), s) << s;
  }
}

TEST(Gpt2RealVocab, InvalidUtf8BecomesReplacementCharacter) {
  Tokenizer t = load(tok_dir("gpt2"));
  // "\xFF" and a truncated 3-byte sequence: each is one U+FFFD, as from_utf8_lossy makes them.
  const std::string bad = "a\xFF" "b\xE4\xBD";
  EXPECT_EQ(t.encode(bad).ids, t.encode("a\xEF\xBF\xBD" "b\xEF\xBF\xBD").ids);
  EXPECT_EQ(decode(t, t.encode(bad).ids), "a\xEF\xBF\xBD" "b\xEF\xBF\xBD");
}

TEST(Gpt2RealVocab, LegacyFilesAndTokenizerJsonAgree) {
  Tokenizer from_json = load(tok_dir("gpt2") + "/tokenizer.json");
  Tokenizer from_legacy = load(tok_dir("gpt2") + "/vocab.json");
  for (const std::string& s : corpus()) EXPECT_EQ(from_json.encode(s).ids, from_legacy.encode(s).ids) << s;
}

TEST(Gpt2RealVocab, OneMegabyteInput) {
  Tokenizer t = load(tok_dir("gpt2"));
  std::string big;
  while (big.size() < (1u << 20)) {
    for (const std::string& s : corpus()) big += s + " ";
    big += std::string(37, ' ') + "1234567890123456789\n";
  }
  const Ids ids = t.encode(big).ids;
  EXPECT_GT(ids.size(), big.size() / 8);
  EXPECT_EQ(decode(t, ids), big);
}

TEST(TokenizerBatch, MatchesSequentialEncoding) {
  Tokenizer t = load(tok_dir("bert-uncased"));
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i) texts.push_back(corpus()[i % corpus().size()] + " #" + std::to_string(i));
  const auto batch = t.encode_batch(texts);
  ASSERT_EQ(batch.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(batch[i].ids, t.encode(texts[i]).ids);
}

TEST(TokenizerLoad, DirectoryWithoutTokenizerListsWhatWasLookedFor) {
  const std::string empty = test::scratch_dir("tokenizer_empty");
  auto t = Tokenizer::load(empty);
  ASSERT_FALSE(t.has_value());
  EXPECT_EQ(t.status().code(), StatusCode::not_found);
  for (const char* name : {"tokenizer.json", "tokenizer.model", "vocab.json", "merges.txt", "vocab.txt"})
    EXPECT_NE(t.status().message().find(name), std::string::npos) << t.status().message();
  EXPECT_FALSE(Tokenizer::load(empty + "/missing").has_value());
}

}  // namespace
}  // namespace prism::text
