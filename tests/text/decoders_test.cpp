// Decoder components on their own, expected outputs derived by hand from HF semantics.
#include <gtest/gtest.h>

#include "text/decoders.h"

namespace prism::text {
namespace {

using Strings = std::vector<std::string>;

std::string run(const Decoder& d, Strings tokens) {
  d.decode_chain(tokens);
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

TEST(Decoders, WordPiece) {
  EXPECT_EQ(run(WordPieceDecoder("##", true), {"my", "name", "is", "jo", "##hn", "."}), "my name is john.");
  EXPECT_EQ(run(WordPieceDecoder("##", true), {"do", "n't", "go"}), "don't go");
  EXPECT_EQ(run(WordPieceDecoder("##", false), {"hi", "."}), "hi .");
}

TEST(Decoders, ByteLevel) {
  EXPECT_EQ(run(ByteLevelDecoder(), {"Hello", "Ġworld", "Ċ", "ä¸Ń"}), "Hello world\n中");
  // Half a character: U+FFFD, as from_utf8_lossy.
  EXPECT_EQ(run(ByteLevelDecoder(), {"ä¸"}), "\xEF\xBF\xBD");
}

TEST(Decoders, Metaspace) {
  const std::string u = "\xE2\x96\x81";
  EXPECT_EQ(run(MetaspaceDecoder(u, true), {u + "Hey", u + "friend", u}), "Hey friend ");
  EXPECT_EQ(run(MetaspaceDecoder(u, false), {u + "Hey", u + "friend"}), " Hey friend");
}

TEST(Decoders, BpeSuffix) {
  EXPECT_EQ(run(BpeDecoder("</w>"), {"hel", "lo</w>", "world</w>"}), "hello world");
}

TEST(Decoders, ByteFallback) {
  EXPECT_EQ(run(ByteFallbackDecoder(), {"a", "<0xE4>", "<0xB8>", "<0xAD>", "b"}), "a中b");
  // An incomplete sequence: one U+FFFD per byte token.
  EXPECT_EQ(run(ByteFallbackDecoder(), {"<0xE4>", "<0xB8>", "x"}), "\xEF\xBF\xBD\xEF\xBF\xBDx");
  EXPECT_EQ(run(ByteFallbackDecoder(), {"<0x41>", "<0xZZ>"}), "A<0xZZ>");
}

TEST(Decoders, FuseStripReplaceSequence) {
  Strings tokens = {"a", "b"};
  FuseDecoder().decode_chain(tokens);
  EXPECT_EQ(tokens, (Strings{"ab"}));
  EXPECT_EQ(run(StripDecoder(" ", 1, 0), {"  hi", " x "}), " hix ");
  EXPECT_EQ(run(StripDecoder(" ", 0, 2), {"hi   "}), "hi ");
  auto u = Regex::literal("\xE2\x96\x81");
  ASSERT_TRUE(u.has_value());
  // Llama 2's decoder: Replace ▁ -> ' ', ByteFallback, Fuse, Strip one leading ' '.
  std::vector<std::unique_ptr<Decoder>> steps;
  steps.push_back(std::make_unique<ReplaceDecoder>(*u, " "));
  steps.push_back(std::make_unique<ByteFallbackDecoder>());
  steps.push_back(std::make_unique<FuseDecoder>());
  steps.push_back(std::make_unique<StripDecoder>(" ", 1, 0));
  EXPECT_EQ(run(SequenceDecoder(std::move(steps)), {"\xE2\x96\x81Hi", "<0x21>", "\xE2\x96\x81\xE2\x96\x81x"}), "Hi!  x");
}

}  // namespace
}  // namespace prism::text
