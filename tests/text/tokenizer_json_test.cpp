// tokenizer.json loading on tiny files written here: model inference for old files, both
// merge formats, added-token flags end to end, post-processors, truncation and padding, and
// the errors for what is not supported.
#include <gtest/gtest.h>

#include "text/tokenizer.h"

namespace prism::text {
namespace {

using Ids = std::vector<TokenId>;

// A character-level BPE: a b c d ab abc, plus the pieces the tests use.
std::string bpe_json(const std::string& merges, const std::string& extra = "") {
  return R"({"model": {"type": "BPE", "vocab": {"a":0,"b":1,"c":2,"d":3,"ab":4,"abc":5,"[CLS]":6,"[SEP]":7,"[PAD]":8,"x":9},
             "merges": )" + merges + "}" + extra + "}";
}

Tokenizer from(const std::string& json) {
  auto t = Tokenizer::from_json(json);
  EXPECT_TRUE(t.has_value()) << t.status().to_string();
  return std::move(t).value();
}

TEST(TokenizerJson, MergesAsStringsOrPairs) {
  Tokenizer old_style = from(bpe_json(R"(["a b", "ab c"])"));
  Tokenizer new_style = from(bpe_json(R"([["a","b"], ["ab","c"]])"));
  EXPECT_EQ(old_style.encode("abcab").ids, (Ids{5, 4}));
  EXPECT_EQ(new_style.encode("abcab").ids, (Ids{5, 4}));
}

TEST(TokenizerJson, ModelTypeInferredWhenAbsent) {
  auto wp = Tokenizer::from_json(R"({"model": {"unk_token": "[UNK]", "continuing_subword_prefix": "##",
      "max_input_chars_per_word": 100, "vocab": {"[UNK]": 0, "un": 1, "##able": 2}},
      "pre_tokenizer": {"type": "WhitespaceSplit"}})");
  ASSERT_TRUE(wp.has_value()) << wp.status().to_string();
  EXPECT_EQ(wp->encode("unable un").ids, (Ids{1, 2, 1}));
  auto uni = Tokenizer::from_json(R"({"model": {"unk_id": 0, "vocab": [["<unk>", 0.0], ["a", -1.0], ["b", -1.0], ["ab", -0.5]]}})");
  ASSERT_TRUE(uni.has_value()) << uni.status().to_string();
  EXPECT_EQ(uni->encode("ab").ids, (Ids{3}));
  Tokenizer bpe = from(R"({"model": {"vocab": {"a":0,"b":1,"ab":2}, "merges": ["a b"]}})");
  EXPECT_EQ(bpe.encode("ab").ids, (Ids{2}));
}

TEST(TokenizerJson, UnsupportedComponentsAreNamedErrors) {
  auto pre = Tokenizer::from_json(bpe_json("[]", R"(, "pre_tokenizer": {"type": "UnicodeScripts"})"));
  ASSERT_FALSE(pre.has_value());
  EXPECT_EQ(pre.status().message(), "tokenizer.json: unsupported pre_tokenizer type 'UnicodeScripts'");
  EXPECT_EQ(pre.status().code(), StatusCode::unimplemented);
  auto norm = Tokenizer::from_json(bpe_json("[]", R"(, "normalizer": {"type": "ByteLevel"})"));
  ASSERT_FALSE(norm.has_value());
  EXPECT_EQ(norm.status().message(), "tokenizer.json: unsupported normalizer type 'ByteLevel'");
  auto dec = Tokenizer::from_json(bpe_json("[]", R"(, "decoder": {"type": "CTC"})"));
  ASSERT_FALSE(dec.has_value());
  EXPECT_NE(dec.status().message().find("decoder type 'CTC'"), std::string::npos);
  auto model = Tokenizer::from_json(R"({"model": {"type": "WordLevel", "vocab": {}, "unk_token": "x"}})");
  ASSERT_FALSE(model.has_value());
  EXPECT_NE(model.status().message().find("model type 'WordLevel'"), std::string::npos);
  EXPECT_FALSE(Tokenizer::from_json("{not json").has_value());
  EXPECT_FALSE(Tokenizer::from_json(R"({"model": {"type": "BPE", "vocab": 3, "merges": []}})").has_value());
  auto regex = Tokenizer::from_json(bpe_json("[]", R"(, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(("}, "behavior": "Isolated", "invert": false})"));
  ASSERT_FALSE(regex.has_value());
  EXPECT_NE(regex.status().message().find("(("), std::string::npos);
}

TEST(TokenizerJson, AddedTokensEndToEnd) {
  const std::string added = R"(, "added_tokens": [
      {"id": 6, "content": "[CLS]", "special": true, "normalized": false, "lstrip": false, "rstrip": false, "single_word": false},
      {"id": 9, "content": "X", "special": false, "normalized": true, "lstrip": false, "rstrip": false, "single_word": false},
      {"id": 7, "content": "[SEP]", "special": true, "normalized": false, "lstrip": true, "rstrip": true, "single_word": false}],
      "normalizer": {"type": "Lowercase"}, "pre_tokenizer": {"type": "WhitespaceSplit"})";
  Tokenizer t = from(bpe_json(R"(["a b"])", added));
  // "[CLS]" is matched on raw text, so the lowercase normalizer never sees it; "X" is matched
  // after normalisation as "x"; "[SEP]" swallows the spaces around it.
  EXPECT_EQ(t.encode("[CLS]ab X  [SEP]  c").ids, (Ids{6, 4, 9, 7, 2}));
  EXPECT_EQ(*t.decode(Ids{6, 4, 9, 7}, true), "ab X");  // an added token decodes as its content
  EXPECT_EQ(*t.decode(Ids{6, 4}, false), "[CLS] ab");  // no decoder: joined with ' '
}

TEST(TokenizerJson, PostProcessorTruncationAndPadding) {
  const std::string extra = R"(,
      "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 7], "cls": ["[CLS]", 6]},
      "truncation": {"max_length": 6, "strategy": "LongestFirst", "stride": 0, "direction": "Right"},
      "padding": {"strategy": "BatchLongest", "direction": "Left", "pad_to_multiple_of": 4, "pad_id": 8,
                  "pad_type_id": 0, "pad_token": "[PAD]"})";
  Tokenizer t = from(bpe_json("[]", extra));
  // Single: 6 - 2 specials = 4 content tokens, then padded on the left to a multiple of 4.
  const Encoding s = t.encode("abcdab");
  EXPECT_EQ(s.ids, (Ids{8, 8, 6, 0, 1, 2, 3, 7}));
  EXPECT_EQ(s.attention_mask, (std::vector<uint8_t>{0, 0, 1, 1, 1, 1, 1, 1}));
  // Pair, longest first: 6 - 3 = 3 tokens; the shorter keeps 1, the longer 2.
  const Encoding p = t.encode_pair("abcd", "c");
  EXPECT_EQ(p.ids, (Ids{8, 8, 6, 0, 1, 7, 2, 7}));
  EXPECT_EQ(p.type_ids, (std::vector<int32_t>{0, 0, 0, 0, 0, 0, 1, 1}));
  // Equal lengths beyond half each: max/2 and the rest.
  TruncationConfig tc;
  tc.max_length = 8;  // 5 content tokens
  t.set_truncation(tc);
  t.set_padding(std::nullopt);
  EXPECT_EQ(t.encode_pair("abcd", "dcba").ids, (Ids{6, 0, 1, 7, 3, 2, 1, 7}));
  tc.strategy = TruncationStrategy::only_second;
  t.set_truncation(tc);
  EXPECT_EQ(t.encode_pair("abc", "dcba").ids, (Ids{6, 0, 1, 2, 7, 3, 2, 7}));
}

TEST(TokenizerJson, RobertaAndTemplateFromJson) {
  Tokenizer r = from(bpe_json("[]", R"(, "post_processor": {"type": "RobertaProcessing", "sep": ["[SEP]", 7],
      "cls": ["[CLS]", 6], "trim_offsets": true, "add_prefix_space": false})"));
  EXPECT_EQ(r.encode_pair("a", "b").ids, (Ids{6, 0, 7, 7, 1, 7}));
  Tokenizer t = from(bpe_json("[]", R"(, "post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 0}},
               {"Sequence": {"id": "B", "type_id": 1}}],
      "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [6], "tokens": ["[CLS]"]},
                         "[SEP]": {"id": "[SEP]", "ids": [7], "tokens": ["[SEP]"]}}})"));
  EXPECT_EQ(t.encode("ab").ids, (Ids{6, 0, 1}));
  EXPECT_EQ(t.encode("ab", false).ids, (Ids{0, 1}));
  EXPECT_EQ(t.encode_pair("a", "b").ids, (Ids{0, 7, 1}));
  EXPECT_EQ(t.encode_pair("a", "b").type_ids, (std::vector<int32_t>{0, 0, 1}));
  auto missing = Tokenizer::from_json(bpe_json("[]", R"(, "post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "pair": [], "special_tokens": {}})"));
  EXPECT_FALSE(missing.has_value());
}

TEST(TokenizerJson, ByteLevelWithSplitLikeLlama3) {
  // Llama 3 / Qwen: Split(regex) then ByteLevel(use_regex false); vocab over the byte alphabet.
  const std::string json = R"({"model": {"type": "BPE", "vocab": {"I":0,"'M":1,"Ġ":2,"1":3,"2":4,"3":5,"12":6,"123":7,"4":8,"'":9,"M":10},
      "merges": [["1","2"],["12","3"],["'","M"]], "ignore_merges": false},
      "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
         "behavior": "Isolated", "invert": false},
        {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]},
      "decoder": {"type": "ByteLevel"}})";
  Tokenizer t = from(json);
  EXPECT_EQ(t.encode("I'M 1234").ids, (Ids{0, 1, 2, 7, 8}));
  EXPECT_EQ(*t.decode(Ids{0, 1, 2, 7, 8}), "I'M 1234");
}

}  // namespace
}  // namespace prism::text
