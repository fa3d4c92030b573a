// BPE model: HF tokenizers' semantics on small hand-checked vocabularies, a naive quadratic
// reference on random vocabularies, GPT-2's real byte-level vocabulary, and libsentencepiece
// itself as the oracle for SentencePiece-style BPE (Llama 2's tokenizer.model).
#include <sentencepiece_processor.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util/paths.h"
#include "test_util/spm_to_json.h"
#include "text/token_model.h"

namespace prism::text {
namespace {

using Ids = std::vector<TokenId>;

std::unique_ptr<TokenModel> make(BpeConfig config) {
  auto model = make_bpe(std::move(config));
  EXPECT_TRUE(model.has_value()) << model.status().to_string();
  return model.has_value() ? std::move(model).value() : nullptr;
}

Ids run(const TokenModel& model, std::string_view piece) {
  Ids out;
  model.tokenize(piece, out);
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The "unrelated" example of HF tokenizers' own tests.
BpeConfig unrelated_config() {
  BpeConfig c;
  const char* tokens[] = {"u", "n", "r", "e", "l", "a", "t", "d", "re", "at", "ed", "un", "ated", "rel", "related",
                          "unrelated"};
  for (int i = 0; i < 16; ++i) c.vocab.emplace_back(tokens[i], i);
  c.merges = {{"r", "e"}, {"a", "t"}, {"e", "d"}, {"u", "n"}, {"at", "ed"}, {"re", "l"}, {"rel", "ated"}, {"un", "related"}};
  return c;
}

TEST(Bpe, MergesByRank) {
  auto m = make(unrelated_config());
  EXPECT_EQ(run(*m, "unrelated"), Ids({15}));
  EXPECT_EQ(run(*m, "related"), Ids({14}));
  EXPECT_EQ(run(*m, "rated"), Ids({2, 12}));  // a t, e d, at ed: "r" never meets an "e"
  EXPECT_EQ(run(*m, ""), Ids());
  EXPECT_EQ(m->vocab_size(), 16);
  EXPECT_EQ(m->id_to_token(13), "rel");
  EXPECT_EQ(m->id_to_token(16), "");
  EXPECT_EQ(m->token_to_id("ated"), 12);
  EXPECT_FALSE(m->token_to_id("x").has_value());
}

TEST(Bpe, ContinuingSubwordPrefixAndSuffix) {
  BpeConfig c;
  c.vocab = {{"a", 0}, {"##b", 1}, {"##c", 2}, {"ab", 3}, {"abc", 4}, {"[UNK]", 5}};
  c.merges = {{"a", "##b"}, {"ab", "##c"}};
  c.unk_token = "[UNK]";
  c.continuing_subword_prefix = "##";
  auto m = make(c);
  EXPECT_EQ(run(*m, "ab"), Ids({3}));
  EXPECT_EQ(run(*m, "abc"), Ids({4}));
  EXPECT_EQ(run(*m, "b"), Ids({5}));  // a first "b" has no prefix and is not in the vocab

  BpeConfig s;
  s.vocab = {{"l", 0}, {"o", 1}, {"w</w>", 2}, {"lo", 3}, {"low</w>", 4}, {"w", 5}};
  s.merges = {{"l", "o"}, {"lo", "w</w>"}};
  s.end_of_word_suffix = "</w>";
  auto ms = make(s);
  EXPECT_EQ(run(*ms, "low"), Ids({4}));
  EXPECT_EQ(run(*ms, "wlo"), Ids({5, 0}));  // last "o" is "o</w>": missing, dropped without unk
}

TEST(Bpe, UnknownsFuseOrNot) {
  BpeConfig c;
  c.vocab = {{"<unk>", 0}, {"a", 1}, {"b", 2}};
  c.unk_token = "<unk>";
  auto plain = make(c);
  EXPECT_EQ(run(*plain, "c"), Ids({0}));
  EXPECT_EQ(run(*plain, "cc"), Ids({0, 0}));
  EXPECT_EQ(run(*plain, "accb"), Ids({1, 0, 0, 2}));
  c.fuse_unk = true;
  auto fused = make(c);
  EXPECT_EQ(run(*fused, "cc"), Ids({0}));
  EXPECT_EQ(run(*fused, "accb"), Ids({1, 0, 2}));
  EXPECT_EQ(run(*fused, "c\xC3\xA9" "c"), Ids({0}));
  c.unk_token.reset();
  auto dropped = make(c);
  EXPECT_EQ(run(*dropped, "acb"), Ids({1, 2}));
}

TEST(Bpe, ByteFallback) {
  BpeConfig c;
  c.vocab = {{"<unk>", 0}, {"<0x61>", 1}, {"<0xC3>", 2}, {"<0xA9>", 3}, {"b", 4}, {"<0x0A>", 5}};
  c.unk_token = "<unk>";
  c.byte_fallback = true;
  c.fuse_unk = true;
  auto m = make(c);
  EXPECT_EQ(run(*m, "a"), Ids({1}));
  EXPECT_EQ(run(*m, "c"), Ids({0}));  // <0x63> missing -> unk
  EXPECT_EQ(run(*m, "\xC3\xA9" "b\n"), Ids({2, 3, 4, 5}));
  // HF quirk kept: a pending unk is not flushed by byte-fallback symbols, so it lands after.
  EXPECT_EQ(run(*m, "ca"), Ids({1, 0}));
  EXPECT_EQ(run(*m, "cac"), Ids({1, 0}));
}

TEST(Bpe, IgnoreMerges) {
  BpeConfig c;
  c.vocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}, {"abc", 5}};
  c.merges = {{"b", "c"}, {"a", "b"}};
  auto m = make(c);
  EXPECT_EQ(run(*m, "abc"), Ids({0, 4}));  // no merge "a bc"
  c.ignore_merges = true;
  auto im = make(c);
  EXPECT_EQ(run(*im, "abc"), Ids({5}));
  EXPECT_EQ(run(*im, "abcabc"), Ids({0, 4, 0, 4}));
}

TEST(Bpe, RejectsBadConfigs) {
  BpeConfig c = unrelated_config();
  c.merges.push_back({"u", "x"});
  EXPECT_FALSE(make_bpe(c).has_value());
  c = unrelated_config();
  c.merges.push_back({"d", "a"});  // "da" not in the vocab
  EXPECT_FALSE(make_bpe(c).has_value());
  c = unrelated_config();
  c.unk_token = "<unk>";
  EXPECT_FALSE(make_bpe(c).has_value());
  c = unrelated_config();
  c.vocab.emplace_back("u", 99);
  EXPECT_FALSE(make_bpe(c).has_value());
}

// Naive reference: repeatedly apply the lowest-rank (then leftmost) adjacent pair. Quadratic,
// obviously right; duplicates in `merges` keep the later rank, as HF's HashMap collect does.
Ids naive_bpe(const std::vector<std::string>& chars, const std::map<std::string, TokenId>& vocab,
              const std::vector<std::pair<std::string, std::string>>& merges) {
  std::map<std::pair<std::string, std::string>, size_t> rank;
  for (size_t i = 0; i < merges.size(); ++i) rank[merges[i]] = i;
  std::vector<std::string> s = chars;
  while (true) {
    size_t best = SIZE_MAX, at = 0;
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      auto it = rank.find({s[i], s[i + 1]});
      if (it != rank.end() && it->second < best) best = it->second, at = i;
    }
    if (best == SIZE_MAX) break;
    s[at] += s[at + 1];
    s.erase(s.begin() + at + 1);
  }
  Ids ids;
  for (const auto& t : s) ids.push_back(vocab.at(t));
  return ids;
}

TEST(Bpe, MatchesNaiveReferenceOnRandomVocabularies) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    // Random merges over a 4-letter alphabet; every merged string joins the vocabulary.
    std::map<std::string, TokenId> vocab;
    std::vector<std::string> tokens = {"a", "b", "c", "d"};
    for (auto& t : tokens) vocab.emplace(t, static_cast<TokenId>(vocab.size()));
    std::vector<std::pair<std::string, std::string>> merges;
    for (int i = 0; i < 60; ++i) {
      const std::string& l = tokens[rng() % tokens.size()];
      const std::string& r = tokens[rng() % tokens.size()];
      if (l.size() + r.size() > 8) continue;
      merges.emplace_back(l, r);
      if (vocab.emplace(l + r, static_cast<TokenId>(vocab.size())).second) tokens.push_back(l + r);
    }
    BpeConfig c;
    c.vocab.assign(vocab.begin(), vocab.end());
    c.merges = merges;
    auto m = make(c);
    for (int k = 0; k < 50; ++k) {
      std::vector<std::string> chars;
      std::string text;
      int len = 1 + static_cast<int>(rng() % 40);
      for (int i = 0; i < len; ++i) chars.emplace_back(1, static_cast<char>('a' + rng() % 4)), text += chars.back();
      ASSERT_EQ(run(*m, text), naive_bpe(chars, vocab, merges)) << "trial " << trial << " text " << text;
    }
  }
}

// ---- GPT-2: real byte-level vocabulary ----

struct Gpt2 {
  std::unique_ptr<TokenModel> model;
  std::vector<std::string> byte_chars;  // [256] GPT-2's printable stand-in for each byte
};

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

const Gpt2& gpt2() {
  static const Gpt2 g = [] {
    Gpt2 g;
    const std::string dir = test::testdata_dir() + "/tokenizers/gpt2/";
    BpeConfig c;
    auto vocab = nlohmann::json::parse(read_file(dir + "vocab.json"));
    for (auto& [token, id] : vocab.items()) c.vocab.emplace_back(token, id.get<TokenId>());
    std::istringstream merges(read_file(dir + "merges.txt"));
    std::string line;
    while (std::getline(merges, line)) {
      if (line.rfind("#version", 0) == 0 || line.empty()) continue;
      size_t sp = line.find(' ');
      c.merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
    }
    EXPECT_EQ(c.merges.size(), 50000u);
    g.model = make(std::move(c));
    // bytes_to_unicode: printable Latin-1 bytes stand for themselves, the rest map to 256+n.
    g.byte_chars.resize(256);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      g.byte_chars[b] = utf8(printable ? b : 256 + n++);
    }
    return g;
  }();
  return g;
}

TEST(BpeGpt2, KnownWords) {
  const TokenModel& m = *gpt2().model;
  ASSERT_EQ(m.vocab_size(), 50257);
  // Expected ids from a naive Python BPE over the same vocab.json/merges.txt.
  EXPECT_EQ(run(m, "Ġthe"), Ids({262}));
  EXPECT_EQ(run(m, "Hello"), Ids({15496}));
  EXPECT_EQ(run(m, "hello"), Ids({31373}));
  EXPECT_EQ(run(m, "Ġworld"), Ids({995}));
  EXPECT_EQ(run(m, "Ġunaffable"), Ids({25312, 540}));
  EXPECT_EQ(run(m, "Ġtokenization"), Ids({11241, 1634}));
  EXPECT_EQ(run(m, "antidisestablishmentarianism"), Ids({415, 29207, 44390, 3699, 1042}));
  EXPECT_EQ(run(m, "ĠSchwarzenegger"), Ids({47507}));
  EXPECT_EQ(run(m, "1234567"), Ids({10163, 2231, 3134}));
  EXPECT_EQ(run(m, "Ġ!!!!"), Ids({220, 13896}));
  EXPECT_EQ(run(m, "ĠÃ©tÃ©"), Ids({220, 25125, 2634}));  // " été" in the byte alphabet
}

TEST(BpeGpt2, EveryByteCharacterHasAnId) {
  const Gpt2& g = gpt2();
  for (int b = 0; b < 256; ++b) {
    Ids ids = run(*g.model, g.byte_chars[b]);
    ASSERT_EQ(ids.size(), 1u) << "byte " << b;
    EXPECT_EQ(g.model->id_to_token(ids[0]), g.byte_chars[b]);
  }
}

// NOTE: linearithmic merging is what keeps this fast; a quadratic BPE takes minutes here.
TEST(BpeGpt2, OneMegabytePieceRoundTrips) {
  const Gpt2& g = gpt2();
  std::mt19937 rng(1);
  const char* words[] = {"the", "Ġquick", "brown", "Ġfox", "jumps", "12", "Ġ", "!", "ĠÃ©", "zzqx", "aaaa"};
  for (int variant = 0; variant < 2; ++variant) {
    std::string piece;
    while (piece.size() < (1u << 20)) piece += variant == 0 ? words[rng() % 11] : "a";
    auto t0 = std::chrono::steady_clock::now();
    Ids ids = run(*g.model, piece);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("[ info ] %s: %zu bytes -> %zu tokens in %.1f ms\n", variant == 0 ? "mixed words" : "\"aaaa...\"",
                piece.size(), ids.size(), ms);
    std::string back;
    for (TokenId id : ids) back += g.model->id_to_token(id);
    ASSERT_EQ(back, piece);
  }
}

// ---- SentencePiece BPE: libsentencepiece on Llama 2's tokenizer.model is the oracle ----

struct Llama {
  sentencepiece::SentencePieceProcessor sp;
  std::unique_ptr<TokenModel> model;
};

BpeConfig llama_config(const std::string& model_path) {
  BpeConfig c;
  auto bpe = test::spm_bpe_vocab_and_merges(model_path);
  EXPECT_TRUE(bpe.has_value()) << bpe.status().to_string();
  if (!bpe.has_value()) return c;
  for (auto& [piece, id] : bpe->vocab) c.vocab.emplace_back(piece, id);
  c.merges = std::move(bpe->merges);
  c.unk_token = bpe->unk_token;
  c.fuse_unk = true;
  c.byte_fallback = true;
  return c;
}

Llama& llama() {
  static Llama* l = [] {
    auto* l = new Llama;  // leaked on purpose: shared by the tests of this binary
    const std::string path = test::testdata_dir() + "/tokenizers/llama2-spm/tokenizer.model";
    auto status = l->sp.Load(path);
    EXPECT_TRUE(status.ok()) << status.ToString();
    l->model = make(llama_config(path));
    return l;
  }();
  return *l;
}

// Llama 2's normaliser, as its tokenizer.json spells it: " " -> "▁", then prepend "▁".
std::string llama_normalize(std::string_view text) {
  std::string out = "\xE2\x96\x81";
  for (char ch : text) {
    if (ch == ' ') out += "\xE2\x96\x81";
    else out += ch;
  }
  return out;
}

std::vector<std::string> oracle_corpus() {
  std::vector<std::string> corpus = {
      "Hello world",
      "The quick brown fox jumps over the lazy dog.",
      "  leading and trailing spaces   ",
      "tabs\tand\nnewlines\r\n mixed",
      "long     whitespace          runs                                          here",
      "                                                                                ",
      "Numbers: 0 1 12 123 1234 3.14159 1,000,000 2023-10-01 0x1F",
      "Punctuation!!! ??? ... --- ;;; ::: \"quotes\" 'single' (parens) [brackets] {braces} <angle>",
      "email@example.com https://www.example.org/path?q=1&r=2#frag",
      "Emoji: 😀 😃 🎉 👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️",
      "中文测试：今天天气很好，我们去公园散步吧。",
      "日本語のテキスト、ひらがなとカタカナと漢字。",
      "한국어 문장도 테스트합니다.",
      "Accents: café naïve résumé façade jalapeño Ångström Øresund Łódź",
      "Ελληνικά κείμενα και Кириллица тоже",
      "العربية النص עברית טקסט हिन्दी पाठ ไทย",
      "Mixed: Hello世界 café😀 123abc ñandú",
      "def f(x):\n    return x**2  # comment\n\n\tprint(f(3))",
      "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
      "unaffable antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
      "\xF0\x9F\xA6\x80 \xE2\x80\x8B zero\xE2\x80\x8Bwidth \xC2\xA0nbsp",
      "a", "ab", "▁", "▁▁", " ", "\n", "I", "I'm can't won't y'all",
  };
  // Random strings over a pool mixing ASCII, spaces, accents, CJK, emoji and rare scripts.
  const std::vector<std::string> pool = {
      "a", "e", "t", "o", "n", "s", "r", "th", "ing", " ", " ", " ", "  ", ".", ",", "!", "?", "'", "\"", "-", "\n",
      "\t", "0", "1", "7", "42", "é", "ü", "ñ", "ß", "Å", "中", "文", "日", "本", "語", "の", "한", "😀", "🎉", "👍🏽",
      "Ж", "λ", "ש", "ع", "क", "ก", "∑", "€", "©", "ǅ", "\xF0\x9D\x94\x98", "\xE2\x96\x81", "<", ">", "#", "~"};
  std::mt19937 rng(123);
  for (int i = 0; i < 2000; ++i) {
    std::string s;
    int len = 1 + static_cast<int>(rng() % 30);
    for (int k = 0; k < len; ++k) s += pool[rng() % pool.size()];
    corpus.push_back(s);
  }
  return corpus;
}

TEST(BpeLlama2, IdenticalToSentencePiece) {
  Llama& l = llama();
  ASSERT_NE(l.model, nullptr);
  std::vector<std::string> corpus = oracle_corpus();
  int identical = 0;
  for (const std::string& text : corpus) {
    std::vector<int> expected;
    ASSERT_TRUE(l.sp.Encode(text, &expected).ok());
    Ids got = run(*l.model, llama_normalize(text));
    EXPECT_EQ(got, Ids(expected.begin(), expected.end())) << "text: " << text;
    identical += got == Ids(expected.begin(), expected.end());
  }
  std::printf("[ info ] Llama 2: %d of %zu strings identical to libsentencepiece\n", identical, corpus.size());
}

TEST(BpeLlama2, KnownIds) {
  Llama& l = llama();
  ASSERT_NE(l.model, nullptr);
  EXPECT_EQ(l.model->vocab_size(), 32000);
  EXPECT_EQ(l.model->token_to_id("<0x0A>"), 13);  // byte pieces start at id 3
  EXPECT_EQ(run(*l.model, "\n"), Ids({13}));
}

}  // namespace
}  // namespace prism::text
