// IncrementalDetokenizer with the real vocabularies in ../shared/testdata: GPT-2's byte-level
// BPE (tokenizer.json), Llama 2's SentencePiece model (through libsentencepiece) and the same
// model as a Llama-layout tokenizer.json (byte fallback + Metaspace/Strip decoder).
#include "engines/generate/detokenizer.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "test_util/paths.h"
#include "test_util/spm_to_json.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

namespace prism::engines::generate {
namespace {

using Ids = std::vector<int32_t>;

const std::string kMixedText =
    "Prism streams text token by token. Ünïcödé façade — naïve café! 😀🎉👍🏽 emoji, "
    "中文字符和日本語のテキスト, 한국어 텍스트, Ελληνικά, русский текст, עברית, العربية. "
    "Maths: ∀x ∈ ℝ, x² ≥ 0; arrows ⇒ ⟶; box drawing ┌─┐; astral 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 and 🧑‍🚀 ZWJ. "
    "  Double  spaces,\ttabs\nand newlines\n\n    indented code { return x; }\n"
    "Numbers 1234567890 and 3.14159, the end.";

struct NamedTokenizer {
  std::string name;
  text::Tokenizer tokenizer;
};

const std::vector<NamedTokenizer>& tokenizers() {
  static const std::vector<NamedTokenizer> all = [] {
    std::vector<NamedTokenizer> v;
    const std::string dir = test::testdata_dir() + "/tokenizers";
    auto gpt2 = text::Tokenizer::load(dir + "/gpt2/tokenizer.json");
    EXPECT_TRUE(gpt2.has_value()) << gpt2.status().to_string();
    if (gpt2) v.push_back({"gpt2-bytelevel", *gpt2});
    const std::string spm_path = dir + "/llama2-spm/tokenizer.model";
    auto spm = text::Tokenizer::load(spm_path);
    EXPECT_TRUE(spm.has_value()) << spm.status().to_string();
    if (spm) v.push_back({"llama2-sentencepiece", *spm});
    for (auto layout : {test::SpmJsonLayout::prepend_replace, test::SpmJsonLayout::metaspace}) {
      auto json = test::spm_to_tokenizer_json(spm_path, layout);
      EXPECT_TRUE(json.has_value()) << json.status().to_string();
      if (!json) continue;
      auto t = text::Tokenizer::from_json(*json);
      EXPECT_TRUE(t.has_value()) << t.status().to_string();
      if (t)
        v.push_back({layout == test::SpmJsonLayout::metaspace ? "llama2-json-metaspace" : "llama2-json-prepend", *t});
    }
    return v;
  }();
  return all;
}

// GPT-2 alone (the tests that need only byte-level BPE skip building the others).
const text::Tokenizer& gpt2() {
  static const text::Tokenizer t = [] {
    auto loaded = text::Tokenizer::load(test::testdata_dir() + "/tokenizers/gpt2/tokenizer.json");
    EXPECT_TRUE(loaded.has_value()) << loaded.status().to_string();
    return loaded ? *loaded : text::Tokenizer();
  }();
  return t;
}

std::string decode(const text::Tokenizer& t, std::span<const int32_t> ids, bool skip_special = true) {
  auto s = t.decode(ids, skip_special);
  EXPECT_TRUE(s.has_value());
  return s ? *s : std::string();
}

// Pushes every token; returns the concatenated deltas (+ finish) and checks the invariants.
std::string stream(const text::Tokenizer& t, const Ids& tail, const Ids& output, std::vector<std::string> stop = {},
                   bool* stopped = nullptr, std::vector<std::string>* deltas = nullptr) {
  IncrementalDetokenizer d(t, tail, std::move(stop));
  std::string all;
  bool was_stopped = false;
  for (int32_t id : output) {
    const IncrementalDetokenizer::Step step = d.push(id);
    if (was_stopped) {
      EXPECT_TRUE(step.stopped && step.text.empty());
    }
    all += step.text;
    if (deltas && !step.text.empty()) deltas->push_back(step.text);
    was_stopped = was_stopped || step.stopped;
    EXPECT_EQ(d.text(), all);
  }
  if (!was_stopped) all += d.finish();
  EXPECT_EQ(d.text(), all);
  if (stopped) *stopped = was_stopped;
  return all;
}

// The text the output adds after the context: decode(context + output) less decode(context).
std::string expected_text(const text::Tokenizer& t, const Ids& tail, const Ids& output) {
  Ids all = tail;
  all.insert(all.end(), output.begin(), output.end());
  const std::string with = decode(t, all), context = decode(t, tail);
  EXPECT_EQ(with.substr(0, context.size()), context);
  return with.substr(context.size());
}

TEST(Detokenizer, DeltasConcatenateToTheFullDecode) {
  ASSERT_EQ(tokenizers().size(), 4u);
  for (const auto& [name, t] : tokenizers()) {
    const Ids ids = t.encode(kMixedText, /*add_special_tokens=*/false).ids;
    ASSERT_GT(ids.size(), 100u) << name;
    std::vector<std::string> deltas;
    EXPECT_EQ(stream(t, {}, ids, {}, nullptr, &deltas), decode(t, ids)) << name;
    // Every delta is whole UTF-8 (no U+FFFD from a split character).
    for (const std::string& d : deltas) EXPECT_EQ(d.find("\xEF\xBF\xBD"), std::string::npos) << name << ": " << d;
  }
}

TEST(Detokenizer, PromptTailGivesTheFirstTokenItsLeadingSpace) {
  for (const auto& [name, t] : tokenizers()) {
    const Ids prompt = t.encode("The capital of France is", false).ids;
    const Ids both = t.encode("The capital of France is Paris, of course 😀.", false).ids;
    ASSERT_GT(both.size(), prompt.size());
    ASSERT_TRUE(std::equal(prompt.begin(), prompt.end(), both.begin())) << name;
    const Ids output(both.begin() + ptrdiff_t(prompt.size()), both.end());
    const Ids tail(prompt.end() - std::min<ptrdiff_t>(5, ptrdiff_t(prompt.size())), prompt.end());
    const std::string got = stream(t, tail, output);
    EXPECT_EQ(got, " Paris, of course 😀.") << name;
    EXPECT_EQ(got, expected_text(t, tail, output)) << name;
  }
}

TEST(Detokenizer, RandomTextsAndSplitsMatchTheFullDecode) {
  // Random mixes of scripts, each streamed after a random-length context.
  const std::vector<std::string> pieces = {"hello", " world", "😀", "🧑‍🚀", "中文", "日本語", "ß", "é", " ", "  ",
                                           "\n", "\t", "{", "}", "123", ".", "—", "𝔘", "Ω", "ñ", "a", "🏽"};
  std::mt19937 gen(3);
  for (const auto& [name, t] : tokenizers()) {
    for (int trial = 0; trial < 40; ++trial) {
      std::string s;
      const int n = std::uniform_int_distribution<int>(1, 40)(gen);
      for (int i = 0; i < n; ++i) s += pieces[std::uniform_int_distribution<size_t>(0, pieces.size() - 1)(gen)];
      const Ids ids = t.encode(s, false).ids;
      // The prompt ends on a whole character (a prompt is text), so does the context.
      size_t cut = std::uniform_int_distribution<size_t>(0, ids.size())(gen);
      while (cut > 0 && decode(t, Ids(ids.begin(), ids.begin() + ptrdiff_t(cut))).ends_with("\xEF\xBF\xBD")) --cut;
      const Ids tail(ids.begin() + ptrdiff_t(cut > 5 ? cut - 5 : 0), ids.begin() + ptrdiff_t(cut));
      const Ids output(ids.begin() + ptrdiff_t(cut), ids.end());
      EXPECT_EQ(stream(t, tail, output), expected_text(t, tail, output)) << name << " trial " << trial << ": " << s;
    }
  }
}

TEST(Detokenizer, ContextEndingInsideACharacterStillGivesWholeUtf8) {
  // Token-id prompts may end inside a character: no crash, and the output is valid text.
  for (const auto& [name, t] : tokenizers()) {
    const Ids ids = t.encode("日本語😀🧑‍🚀 and more 中文", false).ids;
    for (size_t cut = 1; cut < ids.size(); ++cut) {
      const Ids tail(ids.begin() + ptrdiff_t(cut > 5 ? cut - 5 : 0), ids.begin() + ptrdiff_t(cut));
      const Ids output(ids.begin() + ptrdiff_t(cut), ids.end());
      std::string got = stream(t, tail, output);
      EXPECT_TRUE(text::is_valid_utf8(got)) << name << " cut " << cut;
      // What follows the context's broken character is the text's own end.
      while (got.starts_with("\xEF\xBF\xBD")) got.erase(0, 3);
      EXPECT_TRUE(std::string("日本語😀🧑‍🚀 and more 中文").ends_with(got)) << name << " cut " << cut << ": " << got;
    }
  }
}

TEST(Detokenizer, ByteLevelTokensSplittingCharactersAreHeldBack) {
  const text::Tokenizer& t = gpt2();
  // GPT-2 has no token for most CJK characters or emoji: they split into byte tokens.
  const Ids ids = t.encode("中文😀", false).ids;
  ASSERT_GT(ids.size(), 3u);
  IncrementalDetokenizer d(t, {}, {});
  std::string seen;
  for (int32_t id : ids) {
    const auto step = d.push(id);
    EXPECT_EQ(step.text.find("\xEF\xBF\xBD"), std::string::npos);
    seen += step.text;
  }
  EXPECT_EQ(seen, "中文😀");
  EXPECT_EQ(d.finish(), "");
}

TEST(Detokenizer, IncompleteCharacterAtTheEndIsFlushedByFinish) {
  const text::Tokenizer& t = gpt2();
  const Ids ids = t.encode("ok 😀", false).ids;
  ASSERT_GE(ids.size(), 3u);
  const Ids cut(ids.begin(), ids.end() - 1);  // the emoji's last byte never comes
  IncrementalDetokenizer d(t, {}, {});
  std::string seen;
  for (int32_t id : cut) seen += d.push(id).text;
  EXPECT_EQ(seen, "ok ");
  const std::string rest = d.finish();
  EXPECT_EQ(seen + rest, decode(t, cut));
  EXPECT_NE(rest.find("\xEF\xBF\xBD"), std::string::npos);
}

TEST(Detokenizer, StopStringSpanningTokensEndsTheTextBeforeIt) {
  const std::string text = "Hello world, this is a test of stop strings, and more text after it.";
  for (const auto& [name, t] : tokenizers()) {
    const Ids ids = t.encode(text, false).ids;
    for (const std::string stop : {"is a te", "test of", "s, and", "more text after it."}) {
      bool stopped = false;
      const std::string full = decode(t, ids);
      const std::string got = stream(t, {}, ids, {stop}, &stopped);
      EXPECT_TRUE(stopped) << name << " " << stop;
      EXPECT_EQ(got, full.substr(0, full.find(stop))) << name << " " << stop;
    }
    // The earliest of several stop strings wins; an absent one changes nothing.
    bool stopped = false;
    const std::string full = decode(t, ids);
    EXPECT_EQ(stream(t, {}, ids, {"after", "world"}, &stopped), full.substr(0, full.find("world"))) << name;
    EXPECT_EQ(stream(t, {}, ids, {"absent!", "Hello world, this is a test of stop strings, and more text after it.."},
                     &stopped),
              full)
        << name;
    EXPECT_FALSE(stopped);
  }
}

TEST(Detokenizer, TextThatMayBecomeAStopStringIsHeldBack) {
  const text::Tokenizer& t = gpt2();
  // "Hello wor" could still become "Hello world!": nothing past "Hello" may be emitted yet.
  const Ids ids = t.encode("Say Hello world", false).ids;
  IncrementalDetokenizer d(t, {}, {" Hello world!"});
  std::string seen;
  for (int32_t id : ids) {
    const auto step = d.push(id);
    EXPECT_FALSE(step.stopped);
    seen += step.text;
  }
  EXPECT_EQ(seen, "Say");
  EXPECT_EQ(d.finish(), " Hello world");  // finished for another reason: the held text is released
  EXPECT_EQ(d.text(), "Say Hello world");
}

TEST(Detokenizer, StopStringAtTheVeryStart) {
  for (const auto& [name, t] : tokenizers()) {
    const Ids ids = t.encode("Stop right there. More text.", false).ids;
    IncrementalDetokenizer d(t, {}, {"Stop"});
    std::string seen;
    bool stopped = false;
    for (int32_t id : ids) {
      const auto step = d.push(id);
      seen += step.text;
      if (step.stopped) {
        stopped = true;
        break;
      }
    }
    EXPECT_TRUE(stopped) << name;
    EXPECT_EQ(seen, "") << name;
    EXPECT_EQ(d.text(), "") << name;
    EXPECT_EQ(d.finish(), "") << name;
    const auto after = d.push(ids[0]);
    EXPECT_TRUE(after.stopped);
    EXPECT_TRUE(after.text.empty());
  }
}

TEST(Detokenizer, StopStringsWaitForMinTokens) {
  const text::Tokenizer& t = gpt2();
  const Ids ids = t.encode("stop here, then stop again and more", false).ids;  // "stop" is one token
  ASSERT_EQ(*t.decode(Ids{ids[0]}), "stop");
  {
    // The first "stop" is inside the first min_tokens tokens: it is text; the second stops.
    IncrementalDetokenizer d(t, {}, {"stop"}, true, /*min_tokens=*/2);
    std::string seen;
    bool stopped = false;
    for (int32_t id : ids) {
      const auto step = d.push(id);
      seen += step.text;
      if ((stopped = step.stopped)) break;
    }
    EXPECT_TRUE(stopped);
    EXPECT_EQ(seen, "stop here, then ");
  }
  {
    IncrementalDetokenizer d(t, {}, {"stop"}, true, /*min_tokens=*/0);
    EXPECT_TRUE(d.push(ids[0]).stopped);
    EXPECT_EQ(d.text(), "");
  }
}

TEST(Detokenizer, StopStringWithMultiByteCharacters) {
  for (const auto& [name, t] : tokenizers()) {
    const Ids ids = t.encode("Emoji 😀 then 中文 stop here", false).ids;
    bool stopped = false;
    EXPECT_EQ(stream(t, {}, ids, {"😀"}, &stopped), "Emoji ") << name;
    EXPECT_TRUE(stopped);
    EXPECT_EQ(stream(t, {}, ids, {"文 st"}, &stopped), "Emoji 😀 then 中") << name;
    EXPECT_TRUE(stopped);
  }
}

TEST(Detokenizer, SpecialTokensAreSkippedOrKept) {
  const text::Tokenizer& t = gpt2();
  const int32_t eot = *t.token_to_id("<|endoftext|>");
  Ids ids = t.encode("Hi there", false).ids;
  ids.push_back(eot);
  EXPECT_EQ(stream(t, {}, ids), "Hi there");
  IncrementalDetokenizer keep(t, {}, {}, /*skip_special_tokens=*/false);
  std::string seen;
  for (int32_t id : ids) seen += keep.push(id).text;
  seen += keep.finish();
  EXPECT_EQ(seen, "Hi there<|endoftext|>");
}

TEST(Detokenizer, IdsOutsideTheVocabularyHaveNoText) {
  const text::Tokenizer& t = gpt2();
  Ids ids = t.encode("a b", false).ids;
  IncrementalDetokenizer d(t, Ids{-3, 1 << 30}, {});
  std::string seen;
  seen += d.push(ids[0]).text;
  EXPECT_TRUE(d.push(t.vocab_size() + 10).text.empty());
  EXPECT_TRUE(d.push(-1).text.empty());
  for (size_t i = 1; i < ids.size(); ++i) seen += d.push(ids[i]).text;
  seen += d.finish();
  EXPECT_EQ(seen, "a b");
}

}  // namespace
}  // namespace prism::engines::generate
