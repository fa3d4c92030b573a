// Post-processor components on their own (HF semantics).
#include <gtest/gtest.h>

#include "text/post_processors.h"

namespace prism::text {
namespace {

using Ids = std::vector<TokenId>;
using Types = std::vector<int32_t>;

Encoding enc(Ids ids) {
  Encoding e;
  for (TokenId id : ids) e.push_back(id, 0, false);
  return e;
}

Encoding run(const PostProcessor& p, Ids a, std::optional<Ids> b, bool add = true) {
  std::vector<Encoding> encs = {enc(std::move(a))};
  if (b) encs.push_back(enc(std::move(*b)));
  p.process(encs, add);
  Encoding out = encs[0];
  for (size_t i = 1; i < encs.size(); ++i) out.append(encs[i]);
  return out;
}

TEST(PostProcessors, Template) {
  // single: [CLS] $A [SEP]; pair: [CLS] $A [SEP] $B:1 [SEP]:1; [SEP] expands to two ids.
  TemplateProcessor p({{false, "[CLS]", 0}, {true, "A", 0}, {false, "[SEP]", 0}},
                      {{false, "[CLS]", 0}, {true, "A", 0}, {false, "[SEP]", 0}, {true, "B", 1}, {false, "[SEP]", 1}},
                      {{"[CLS]", {101}}, {"[SEP]", {102, 103}}});
  EXPECT_EQ(p.num_added_tokens(false), 3u);
  EXPECT_EQ(p.num_added_tokens(true), 5u);
  Encoding s = run(p, {7, 8}, std::nullopt);
  EXPECT_EQ(s.ids, (Ids{101, 7, 8, 102, 103}));
  EXPECT_EQ(s.special_tokens_mask, (std::vector<uint8_t>{1, 0, 0, 1, 1}));
  Encoding pr = run(p, {7}, Ids{9});
  EXPECT_EQ(pr.ids, (Ids{101, 7, 102, 103, 9, 102, 103}));
  EXPECT_EQ(pr.type_ids, (Types{0, 0, 0, 0, 1, 1, 1}));
  Encoding plain = run(p, {7}, Ids{9}, false);
  EXPECT_EQ(plain.ids, (Ids{7, 9}));
  EXPECT_EQ(plain.type_ids, (Types{0, 1}));
}

TEST(PostProcessors, BertAndRoberta) {
  BertProcessor bert(101, 102);
  Encoding b = run(bert, {7}, Ids{9, 10});
  EXPECT_EQ(b.ids, (Ids{101, 7, 102, 9, 10, 102}));
  EXPECT_EQ(b.type_ids, (Types{0, 0, 0, 1, 1, 1}));
  RobertaProcessor roberta(0, 2);
  Encoding r = run(roberta, {7}, Ids{9});
  EXPECT_EQ(r.ids, (Ids{0, 7, 2, 2, 9, 2}));
  EXPECT_EQ(r.type_ids, (Types{0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(roberta.num_added_tokens(true), 4u);
  EXPECT_EQ(run(roberta, {7}, std::nullopt, false).ids, (Ids{7}));
}

TEST(PostProcessors, SequenceWithByteLevel) {
  std::vector<std::unique_ptr<PostProcessor>> steps;
  steps.push_back(std::make_unique<IdentityProcessor>());
  steps.push_back(std::make_unique<TemplateProcessor>(std::vector<TemplatePiece>{{false, "<|bos|>", 0}, {true, "A", 0}},
                                                      std::vector<TemplatePiece>{{false, "<|bos|>", 0}, {true, "A", 0}, {true, "B", 1}},
                                                      std::map<std::string, std::vector<TokenId>>{{"<|bos|>", {1}}}));
  SequenceProcessor seq(std::move(steps));
  EXPECT_EQ(seq.num_added_tokens(false), 1u);
  EXPECT_EQ(run(seq, {5, 6}, std::nullopt).ids, (Ids{1, 5, 6}));
}

}  // namespace
}  // namespace prism::text
