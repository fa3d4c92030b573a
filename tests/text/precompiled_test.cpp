// Precompiled (SentencePiece charsmap) and Nmt normalizers. The oracle is libsentencepiece
// itself: it trains a small Unigram model here with the nmt_nfkc rules (T5's and XLM-R's), whose
// normalizer_spec.precompiled_charsmap is the real blob; the model is written out as a
// tokenizer.json in the t5-small / xlm-roberta-base layouts and Prism's ids must equal
// SentencePieceProcessor::Encode on text full of characters NFKC rewrites.
#include <sentencepiece_processor.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util/spm_to_json.h"
#include "text/normalizers.h"
#include "text/precompiled.h"
#include "text/tokenizer.h"

namespace prism::text {
namespace {

using json = nlohmann::json;
using Ids = std::vector<TokenId>;

const std::string kSpace = "\xE2\x96\x81";  // "▁"

std::string base64_encode(std::string_view bytes) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (unsigned char b : bytes) {
    acc = (acc << 8) | b;
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out.push_back(kAlphabet[(acc >> bits) & 63]);
    }
  }
  if (bits > 0) out.push_back(kAlphabet[(acc << (6 - bits)) & 63]);
  while (out.size() % 4) out.push_back('=');
  return out;
}

// ---- protobuf wire format, just enough to read ModelProto.normalizer_spec ----

bool read_varint(std::string_view s, size_t& i, uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64 && i < s.size(); shift += 7) {
    const auto b = static_cast<unsigned char>(s[i++]);
    v |= uint64_t{b & 0x7Fu} << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

// The bytes of length-delimited field `field` of a serialised message ("" if absent).
std::string proto_field(std::string_view msg, uint32_t field) {
  size_t i = 0;
  while (i < msg.size()) {
    uint64_t key = 0, v = 0;
    if (!read_varint(msg, i, key)) break;
    switch (key & 7) {
      case 0: read_varint(msg, i, v); break;
      case 1: i += 8; break;
      case 5: i += 4; break;
      case 2:
        if (!read_varint(msg, i, v) || i + v > msg.size()) return "";
        if ((key >> 3) == field) return std::string(msg.substr(i, v));
        i += v;
        break;
      default: return "";
    }
  }
  return "";
}

std::vector<std::string> training_corpus() {
  const std::vector<std::string> lines = {
      "The quick brown fox jumps over the lazy dog while the model learns its pieces.",
      "Tokenization of multilingual text needs normalisation first, then segmentation.",
      "Le café est très bon à Paris, naïve résumé, façade, élève, où, déjà vu.",
      "Die Straße in München ist schön, Übergrößen und Äpfel für Öl.",
      "El niño comió una piña en la mañana, ¿verdad? ¡Sí!",
      "Москва — столица России, привет мир, спасибо большое.",
      "Αθήνα είναι η πρωτεύουσα της Ελλάδας, καλημέρα κόσμε.",
      "東京は日本の首都です。今日はいい天気ですね。カタカナとひらがな。",
      "北京是中国的首都。你好，世界！我们学习语言模型。",
      "서울은 한국의 수도입니다. 안녕하세요 세계.",
      "مرحبا بالعالم، هذه جملة عربية للاختبار.",
      "नमस्ते दुनिया, यह हिन्दी का वाक्य है।",
      "Numbers 1234567890 and 3.14159, 42% of 100 dollars, 2024-01-31.",
      "Emoji 😀 🎉 👍 ❤️ and symbols © ® ™ € £ ¥ § ¶ † ‡ • … ‰.",
  };
  std::vector<std::string> out;
  for (int rep = 0; rep < 30; ++rep)
    for (const auto& l : lines) out.push_back(l);
  return out;
}

// Characters NFKC (and the NMT rules) rewrite, and the whitespace SentencePiece cleans up.
std::vector<std::string> oracle_corpus() {
  return {
      "ＡＢＣ１２３ ｆｕｌｌ－ｗｉｄｔｈ ｔｅｘｔ！",
      "\xEF\xAC\x81nance \xEF\xAC\x82ow o\xEF\xAC\x80ice",  // ﬁ ﬂ ﬀ ligatures
      "① ② ③ ⑴ ⒈ ⓐ ㉑",
      "x² + y³ = z⁴, H₂O, 10⁻³, ½ ¼ ¾",
      "㍻ ㌔ ㎏ ㈱ ㋿ ㍿ ㎡",
      "ｶﾀｶﾅ ﾃｽﾄ ｱｲｳｴｵ",
      "cafe\xCC\x81 nai\xCC\x88ve Ame\xCC\x81lie",  // combining acute / diaeresis
      "ﻻ ﷲ ﺏ ﻼ ﷺ",
      "   leading spaces and trailing   ",
      "multiple    spaces\tand\ttabs\nand\nnewlines\r\nand CRLF",
      "\t\n \t",
      "emoji 😀🎉 👍🏽 👨‍👩‍👧 🇫🇷🇩🇪 ❤️",
      "Ⅻ ⅷ ™ ℃ ℉ № ℡ ﹐ ﹖ ︵",
      "ｈｔｔｐｓ：／／ｅｘａｍｐｌｅ．ｃｏｍ／ｐａｔｈ？ｑ＝１",
      "control\x01" "chars\x7f" "here\x0b" "and\x1f" "there",
      "nbsp\xC2\xA0here ideographic\xE3\x80\x80space zero\xE2\x80\x8Bwidth",
      "The quick brown fox jumps over the lazy dog.",
      "Le café est très bon, naïve résumé.",
      "東京は日本の首都です。",
      "서울은 한국의 수도입니다.",
      "नमस्ते दुनिया",
      "مرحبا بالعالم",
      "Ελληνικά ΑΘΗΝΑ and КИРИЛЛИЦА",
      "a",
      "",
      "        ",
      "MiXeD cAsE wOrDs 123abc abc123",
      "punctuation!!! ??? ... --- ''' \"quoted\"",
      "\xE2\x80\x83" "em space\xE2\x80\x82" "en space\xE2\x80\xA8line sep",
      "ｱﾞ ｲﾟ ﾞ ﾟ",
      "ǅ ǈ ǋ ﬅ ﬆ",
  };
}

struct TrainedModel {
  std::string proto;     // serialised ModelProto
  std::string charsmap;  // its normalizer_spec.precompiled_charsmap
  sentencepiece::SentencePieceProcessor sp;
};

// Trained once for the whole file: nmt_nfkc rules, default whitespace handling.
const TrainedModel& trained() {
  static TrainedModel* m = [] {
    auto* t = new TrainedModel;
    const auto corpus = training_corpus();
    const std::string args =
        "--model_type=unigram --normalization_rule_name=nmt_nfkc --vocab_size=600 --hard_vocab_limit=false "
        "--character_coverage=0.9995 --num_threads=1 --minloglevel=2";
    auto proto = test::train_sentencepiece(corpus, args);
    EXPECT_TRUE(proto.has_value()) << proto.status().to_string();
    t->proto = proto.has_value() ? *proto : std::string();
    EXPECT_TRUE(t->sp.LoadFromSerializedProto(t->proto).ok());
    t->charsmap = proto_field(proto_field(t->proto, 3), 2);
    return t;
  }();
  return *m;
}

json special(int id, const std::string& content) {
  return {{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", true}};
}

json template_piece(const std::string& kind, const std::string& id, int type_id) {
  return {{kind, {{"id", id}, {"type_id", type_id}}}};
}

json special_entry(const std::string& name, int id) {
  return {{"id", name}, {"ids", json::array({id})}, {"tokens", json::array({name})}};
}

// t5-small's layout: Precompiled, then WhitespaceSplit + Metaspace (old add_prefix_space
// form); Unigram with SentencePiece's own ids; "$A </s>".
json t5_layout(const TrainedModel& m) {
  const auto& sp = m.sp;
  json vocab = json::array();
  for (int i = 0; i < sp.GetPieceSize(); ++i) vocab.push_back(json::array({sp.IdToPiece(i), sp.GetScore(i)}));
  const int eos = sp.eos_id();
  json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = json::array({special(sp.unk_id(), "<unk>"), special(sp.bos_id(), "<s>"), special(eos, "</s>")});
  j["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", base64_encode(m.charsmap)}};
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         json::array({{{"type", "WhitespaceSplit"}},
                                      {{"type", "Metaspace"}, {"replacement", kSpace}, {"str_rep", kSpace}, {"add_prefix_space", true}}})}};
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", json::array({template_piece("Sequence", "A", 0), template_piece("SpecialToken", "</s>", 0)})},
                         {"pair", json::array({template_piece("Sequence", "A", 0), template_piece("SpecialToken", "</s>", 0),
                                               template_piece("Sequence", "B", 0), template_piece("SpecialToken", "</s>", 0)})},
                         {"special_tokens", {{"</s>", special_entry("</s>", eos)}}}};
  j["decoder"] = {{"type", "Metaspace"}, {"replacement", kSpace}, {"add_prefix_space", true}};
  j["model"] = {{"type", "Unigram"}, {"unk_id", sp.unk_id()}, {"vocab", vocab}, {"byte_fallback", false}};
  return j;
}

// xlm-roberta-base's layout: fairseq ids (<s> <pad> </s> <unk>, then SentencePiece's pieces
// from id 3 on shifted by one, <mask> last), newer prepend_scheme form, "<s> $A </s>".
json xlmr_layout(const TrainedModel& m) {
  const auto& sp = m.sp;
  json vocab = json::array({json::array({"<s>", 0.0}), json::array({"<pad>", 0.0}), json::array({"</s>", 0.0}),
                            json::array({"<unk>", 0.0})});
  for (int i = 3; i < sp.GetPieceSize(); ++i) vocab.push_back(json::array({sp.IdToPiece(i), sp.GetScore(i)}));
  const int mask = static_cast<int>(vocab.size());
  vocab.push_back(json::array({"<mask>", 0.0}));
  json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = json::array({special(0, "<s>"), special(1, "<pad>"), special(2, "</s>"), special(3, "<unk>"),
                                   special(mask, "<mask>")});
  j["added_tokens"][4]["lstrip"] = true;
  j["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", base64_encode(m.charsmap)}};
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         json::array({{{"type", "WhitespaceSplit"}},
                                      {{"type", "Metaspace"}, {"replacement", kSpace}, {"prepend_scheme", "always"}, {"split", true}}})}};
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", json::array({template_piece("SpecialToken", "<s>", 0), template_piece("Sequence", "A", 0),
                              template_piece("SpecialToken", "</s>", 0)})},
      {"pair", json::array({template_piece("SpecialToken", "<s>", 0), template_piece("Sequence", "A", 0),
                            template_piece("SpecialToken", "</s>", 0), template_piece("SpecialToken", "</s>", 0),
                            template_piece("Sequence", "B", 0), template_piece("SpecialToken", "</s>", 0)})},
      {"special_tokens", {{"<s>", special_entry("<s>", 0)}, {"</s>", special_entry("</s>", 2)}}}};
  j["decoder"] = {{"type", "Metaspace"}, {"replacement", kSpace}, {"prepend_scheme", "always"}, {"split", true}};
  j["model"] = {{"type", "Unigram"}, {"unk_id", 3}, {"vocab", vocab}, {"byte_fallback", false}};
  return j;
}

Ids spm_ids(const std::string& text) {
  std::vector<int> ids;
  EXPECT_TRUE(trained().sp.Encode(text, &ids).ok());
  return Ids(ids.begin(), ids.end());
}

std::string escape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02X", c);
      out += buf;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
}

// ---- the charsmap itself ----

TEST(CharsMap, KnownNmtNfkcRules) {
  ASSERT_FALSE(trained().charsmap.empty());
  auto map = CharsMap::parse(trained().charsmap);
  ASSERT_TRUE(map.has_value()) << map.status().to_string();
  EXPECT_EQ(map->shortest_prefix("\xEF\xBC\xA1\xEF\xBC\xA2\xEF\xBC\xA3"), std::optional<std::string_view>("A"));  // "ＡＢＣ"
  EXPECT_EQ(map->shortest_prefix("\xEF\xAC\x81"), std::optional<std::string_view>("fi"));                     // "ﬁ"
  EXPECT_EQ(map->shortest_prefix("\xE2\x91\xA0"), std::optional<std::string_view>("1"));                      // "①"
  EXPECT_EQ(map->shortest_prefix("\xC2\xB2"), std::optional<std::string_view>("2"));                          // "²"
  EXPECT_EQ(map->shortest_prefix("\xEF\xBD\xB6"), std::optional<std::string_view>("\xE3\x82\xAB"));          // "ｶ" -> "カ"
  EXPECT_EQ(map->shortest_prefix("\t"), std::optional<std::string_view>(" "));
  EXPECT_EQ(map->shortest_prefix("abc"), std::nullopt);
  EXPECT_EQ(map->shortest_prefix(""), std::nullopt);
  std::string_view r;
  EXPECT_EQ(map->longest_prefix("\xEF\xBC\xA1xyz", r), 3u);
  EXPECT_EQ(r, "A");
  EXPECT_EQ(map->longest_prefix("xyz", r), 0u);

  PrecompiledNormalizer n(*map);
  auto norm = [&](std::string s) {
    n.normalize(s);
    return s;
  };
  EXPECT_EQ(norm("\xEF\xBC\xA1\xEF\xBC\xA2\xEF\xBC\xA3"), "ABC");
  EXPECT_EQ(norm("\xEF\xAC\x81nance"), "finance");
  EXPECT_EQ(norm("plain ascii stays"), "plain ascii stays");
  EXPECT_EQ(norm("a\tb"), "a b");
  EXPECT_EQ(norm(""), "");
}

TEST(CharsMap, RejectsMalformedBlobs) {
  EXPECT_FALSE(CharsMap::parse("abc").has_value());                          // shorter than the header
  EXPECT_FALSE(CharsMap::parse(std::string("\x08\x00\x00\x00xyz", 7)).has_value());  // trie past the end
  EXPECT_FALSE(CharsMap::parse(std::string("\x03\x00\x00\x00xyzw", 8)).has_value()); // not whole units
  auto empty = CharsMap::parse("");
  ASSERT_TRUE(empty.has_value());
  EXPECT_EQ(empty->shortest_prefix("x"), std::nullopt);
  // A trie of garbage units never reads out of bounds.
  auto garbage = CharsMap::parse(std::string("\x08\x00\x00\x00\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFFpool", 16));
  ASSERT_TRUE(garbage.has_value());
  EXPECT_EQ(garbage->shortest_prefix("\xFF\xFF"), std::nullopt);
}

TEST(Base64, DecodesWithAndWithoutPadding) {
  EXPECT_EQ(base64_decode("aGVsbG8=").value(), "hello");
  EXPECT_EQ(base64_decode("aGVsbG8").value(), "hello");
  EXPECT_EQ(base64_decode("").value(), "");
  EXPECT_FALSE(base64_decode("a$==").has_value());
  const std::string bytes("\x00\xFF\x10\x80\x7F", 5);
  EXPECT_EQ(base64_decode(base64_encode(bytes)).value(), bytes);
}

TEST(Nmt, DropsControlsAndFoldsSpaces) {
  std::string s = "a\x01" "b\x7f" "c\td\ne\xE2\x80\x8B" "f\xEF\xBB\xBFg\xE2\x96\x81h\xC2\x8Fi\xE3\x80\x80j";
  NmtNormalizer().normalize(s);
  EXPECT_EQ(s, "abc d e f g h" "i\xE3\x80\x80j");  // U+3000 is not NMT's (NFKC's)
}

// ---- the oracle ----

// Total score and spelling of a SentencePiece id sequence.
std::pair<double, std::string> path_of(const Ids& spm) {
  double score = 0;
  std::string text;
  for (TokenId id : spm) {
    score += trained().sp.GetScore(id);
    text += trained().sp.IdToPiece(id);
  }
  return {score, text};
}

// NOTE: HF sums Viterbi path scores in f64, SentencePiece in f32, so where two segmentations
// tie exactly ("▁" "." ".." vs "▁" ".." ".") rounding picks differently. Such a difference is
// accepted only as a tie: the same pieces' text and the same total score; it is counted apart.
void expect_identical(const Tokenizer& t, bool xlmr_ids) {
  int identical = 0, ties = 0;
  const auto corpus = oracle_corpus();
  for (const std::string& text : corpus) {
    const Ids spm = spm_ids(text);
    Ids expected = spm;
    if (xlmr_ids)
      for (TokenId& id : expected) id = id == trained().sp.unk_id() ? 3 : id + 1;
    const Ids got = t.encode(text, /*add_special_tokens=*/false).ids;
    if (got == expected) {
      ++identical;
      continue;
    }
    Ids got_spm = got;
    if (xlmr_ids)
      for (TokenId& id : got_spm) id = id == 3 ? trained().sp.unk_id() : id - 1;
    const auto [want_score, want_text] = path_of(spm);
    const auto [got_score, got_text] = path_of(got_spm);
    const bool tie = got_text == want_text && std::abs(got_score - want_score) < 1e-4;
    EXPECT_TRUE(tie) << "text: " << escape(text) << "\n got " << ::testing::PrintToString(got) << "\n want "
                     << ::testing::PrintToString(expected);
    ties += tie;
  }
  EXPECT_GE(identical, static_cast<int>(corpus.size()) - 2);
  std::printf("[ info ] precompiled %s layout: %d of %zu strings identical to libsentencepiece, %d equal-score ties\n",
              xlmr_ids ? "xlm-roberta" : "t5", identical, corpus.size(), ties);
}

// Where HF's rule (grapheme clusters, shortest rule) and SentencePiece's (longest rule over
// the bytes) part ways, Prism follows HF: these are HF's outputs, derived from its code.
TEST(PrecompiledOracle, FollowsHuggingFaceWhereSentencePieceDiffers) {
  auto map = CharsMap::parse(trained().charsmap);
  ASSERT_TRUE(map.has_value());
  PrecompiledNormalizer n(*map);
  auto norm = [&](std::string s) {
    n.normalize(s);
    return s;
  };
  // "ﾊﾟ" is one 6-byte cluster: too long for the whole-cluster rule, so each character maps
  // alone (ﾊ -> ハ, ﾟ -> combining U+309A); SentencePiece composes "パ".
  EXPECT_EQ(norm("\xEF\xBE\x8A\xEF\xBE\x9F"), "\xE3\x83\x8F\xE3\x82\x9A");
  // "ｅ" + U+0301 (5 bytes): the shortest rule, ｅ -> e, replaces the whole cluster, so the
  // accent is lost; SentencePiece gives "é".
  EXPECT_EQ(norm("\xEF\xBD\x85\xCC\x81"), "e");
  // e + three combining marks (7 bytes): character by character, nothing composes.
  EXPECT_EQ(norm("e\xCC\x81\xCC\x82\xCC\x83"), "e\xCC\x81\xCC\x82\xCC\x83");
  // CR LF is one cluster; its shortest rule (CR -> ' ') stands for both.
  EXPECT_EQ(norm("a\r\nb"), "a b");
}

TEST(PrecompiledOracle, T5LayoutIdenticalToSentencePiece) {
  auto t = Tokenizer::from_json(t5_layout(trained()).dump());
  ASSERT_TRUE(t.has_value()) << t.status().to_string();
  expect_identical(*t, false);
  // "$A </s>"
  const Ids plain = spm_ids("ＡＢＣ ﬁ");
  Ids with_eos = plain;
  with_eos.push_back(trained().sp.eos_id());
  EXPECT_EQ(t->encode("ＡＢＣ ﬁ").ids, with_eos);
}

TEST(PrecompiledOracle, XlmRobertaLayoutIdenticalToSentencePiece) {
  auto t = Tokenizer::from_json(xlmr_layout(trained()).dump());
  ASSERT_TRUE(t.has_value()) << t.status().to_string();
  expect_identical(*t, true);
  // "<s> $A </s>" and "<s> $A </s> </s> $B </s>"
  Ids a = spm_ids("Hello ＷＯＲＬＤ"), b = spm_ids("ﬁne");
  for (TokenId& id : a) id = id == 0 ? 3 : id + 1;
  for (TokenId& id : b) id = id == 0 ? 3 : id + 1;
  Ids single = {0};
  single.insert(single.end(), a.begin(), a.end());
  single.push_back(2);
  EXPECT_EQ(t->encode("Hello ＷＯＲＬＤ").ids, single);
  Ids pair = single;
  pair.push_back(2);
  pair.insert(pair.end(), b.begin(), b.end());
  pair.push_back(2);
  EXPECT_EQ(t->encode_pair("Hello ＷＯＲＬＤ", "ﬁne").ids, pair);
  // Added tokens are cut out before normalisation; <mask> swallows the space on its left.
  Ids masked = {0};
  masked.insert(masked.end(), a.begin(), a.end());
  masked.push_back(static_cast<TokenId>(t->vocab_size() - 1));
  masked.push_back(2);
  EXPECT_EQ(t->encode("Hello ＷＯＲＬＤ <mask>").ids, masked);
  // Decoding goes back through the Metaspace decoder.
  EXPECT_EQ(t->decode(t->encode("the quick brown fox", false).ids).value(), "the quick brown fox");
}

TEST(PrecompiledOracle, LoadPicksTokenizerJsonFromADirectory) {
  const auto dir = std::filesystem::temp_directory_path() / ("prism_precompiled_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    std::ofstream(dir / "tokenizer.json") << xlmr_layout(trained()).dump();
    std::ofstream(dir / "tokenizer_config.json") << R"({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"})";
    // A tokenizer.model next to it (SentencePiece's ids, not XLM-R's) must not be chosen.
    std::ofstream(dir / "tokenizer.model", std::ios::binary) << trained().proto;
  }
  auto t = Tokenizer::load(dir.string());
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(t.has_value()) << t.status().to_string();
  expect_identical(*t, true);
  EXPECT_EQ(t->special_token_ids().bos, std::optional<TokenId>(0));
  EXPECT_EQ(t->special_token_ids().eos, std::optional<TokenId>(2));
  EXPECT_EQ(t->special_token_ids().unk, std::optional<TokenId>(3));
}

TEST(PrecompiledOracle, MalformedCharsmapIsAnError) {
  json j = t5_layout(trained());
  j["normalizer"]["precompiled_charsmap"] = "not base64!";
  EXPECT_FALSE(Tokenizer::from_json(j.dump()).has_value());
  j["normalizer"]["precompiled_charsmap"] = base64_encode("\xFF\xFF\xFF\x7F");
  EXPECT_FALSE(Tokenizer::from_json(j.dump()).has_value());
}

}  // namespace
}  // namespace prism::text
