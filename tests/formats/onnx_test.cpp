// read_onnx_weights on the real silero_vad.onnx (names, shapes and values printed by
// python3-onnx, which wrote nothing here: an independent reader) and on small models whose
// bytes are built here by hand from protobuf's wire format and onnx.proto's field numbers:
// every place a weight can live (initializers, Constant nodes and their value_* forms, If /
// Loop bodies at any depth), every encoding (raw_data, packed and unpacked typed fields), and
// each malformed file as a clear Status, never a crash.
#include "formats/onnx.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>

#include "test_util/paths.h"

namespace prism::formats {
namespace {

using ::testing::HasSubstr;

std::string silero_path() { return test::testdata_dir() + "/vad/silero_vad.onnx"; }

std::string write_bytes(const std::string& dir, const std::string& name, const std::string& bytes) {
  const std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
  return path;
}

// A protobuf message written field by field (key = number << 3 | wire type).
struct Proto {
  std::string bytes;

  static std::string varint_bytes(uint64_t v) {
    std::string s;
    do {
      s.push_back(char((v & 0x7f) | (v >= 0x80 ? 0x80 : 0)));
      v >>= 7;
    } while (v);
    return s;
  }
  Proto& varint(uint32_t field, uint64_t v) {
    bytes += varint_bytes(uint64_t(field) << 3 | 0) + varint_bytes(v);
    return *this;
  }
  Proto& fixed32(uint32_t field, float v) {
    const uint32_t u = std::bit_cast<uint32_t>(v);
    bytes += varint_bytes(uint64_t(field) << 3 | 5) + std::string(reinterpret_cast<const char*>(&u), 4);
    return *this;
  }
  Proto& str(uint32_t field, std::string_view b) {
    bytes += varint_bytes(uint64_t(field) << 3 | 2) + varint_bytes(b.size()) + std::string(b);
    return *this;
  }
  Proto& msg(uint32_t field, const Proto& m) { return str(field, m.bytes); }
};

// onnx.proto field numbers.
enum : uint32_t {
  kModelIrVersion = 1, kModelProducer = 2, kModelGraph = 7, kModelOpset = 8,
  kGraphNode = 1, kGraphInitializer = 5,
  kNodeOutput = 2, kNodeOpType = 4, kNodeAttribute = 5, kNodeDomain = 7,
  kAttrName = 1, kAttrF = 2, kAttrI = 3, kAttrT = 5, kAttrG = 6, kAttrFloats = 7, kAttrInts = 8, kAttrGraphs = 11,
  kAttrType = 20,
  kTensorDims = 1, kTensorDataType = 2, kTensorFloatData = 4, kTensorInt64Data = 7, kTensorName = 8,
  kTensorRawData = 9, kTensorDoubleData = 10, kTensorDataLocation = 14,
};
constexpr uint64_t kFloat = 1, kInt64 = 7, kDouble = 11;

enum class Encoding { raw, packed, unpacked };

Proto float_tensor(const std::string& name, std::vector<int64_t> dims, std::vector<float> values,
                   Encoding enc = Encoding::raw) {
  Proto t;
  for (int64_t d : dims) t.varint(kTensorDims, uint64_t(d));
  t.varint(kTensorDataType, kFloat);
  if (!name.empty()) t.str(kTensorName, name);
  if (enc == Encoding::raw) {
    t.str(kTensorRawData, std::string_view(reinterpret_cast<const char*>(values.data()), values.size() * 4));
  } else if (enc == Encoding::packed) {
    t.str(kTensorFloatData, std::string_view(reinterpret_cast<const char*>(values.data()), values.size() * 4));
  } else {
    for (float v : values) t.fixed32(kTensorFloatData, v);
  }
  return t;
}

Proto attribute(const std::string& name, uint32_t field, const Proto& value) {
  return Proto().str(kAttrName, name).msg(field, value);
}

Proto constant_node(const std::string& output, const Proto& value) {
  return Proto().str(kNodeOpType, "Constant").str(kNodeOutput, output).msg(kNodeAttribute, attribute("value", kAttrT, value));
}

Proto model(const Proto& graph) {
  return Proto()
      .varint(kModelIrVersion, 8)
      .str(kModelProducer, "prism-test")
      .msg(kModelOpset, Proto().str(1, "").varint(2, 16))
      .msg(kModelOpset, Proto().str(1, "ai.onnx.ml").varint(2, 3))
      .msg(kModelGraph, graph);
}

std::vector<float> values_of(const Tensor& t) {
  const float* p = t.data<float>();
  return {p, p + t.numel()};
}

TEST(OnnxWeights, ReadsTheRealSileroFile) {
  Result<OnnxWeights> w = read_onnx_weights(silero_path());
  ASSERT_TRUE(w.has_value()) << w.status().to_string();
  EXPECT_EQ(w->ir_version, 8);
  EXPECT_EQ(w->opset, 16);
  EXPECT_EQ(w->producer, "spox");
  const auto& t = w->tensors;
  // Both branches of If(sr == 16000), as Constant nodes under the exporter's prefixes.
  const std::string k16 = "If_0_then_branch__Inline_0__", k8 = "If_0_else_branch__Inline_0__";
  ASSERT_TRUE(t.count(k16 + "stft.forward_basis_buffer"));
  EXPECT_EQ(t.at(k16 + "stft.forward_basis_buffer").shape(), (Dims{258, 1, 256}));
  EXPECT_EQ(t.at(k8 + "stft.forward_basis_buffer").shape(), (Dims{130, 1, 128}));
  EXPECT_EQ(t.at(k16 + "encoder.0.reparam_conv.weight").shape(), (Dims{128, 129, 3}));
  EXPECT_EQ(t.at(k16 + "decoder.rnn.weight_ih").shape(), (Dims{512, 128}));
  EXPECT_EQ(t.at(k16 + "decoder.rnn.weight_hh").dtype(), DType::f32);
  // Values as python3-onnx prints them.
  EXPECT_FLOAT_EQ(t.at(k16 + "decoder.decoder.2.bias").data<float>()[0], -0.6245977282524109f);
  EXPECT_FLOAT_EQ(t.at(k8 + "decoder.decoder.2.bias").data<float>()[0], -0.5900866985321045f);
  // The top graph's i64 scalar (sr compared with it) and a constant five Ifs deep.
  const Tensor& sr = t.at("Constant_0_output");
  EXPECT_EQ(sr.dtype(), DType::i64);
  EXPECT_EQ(sr.dim(), 0);
  EXPECT_EQ(sr.data<int64_t>()[0], 16000);
  ASSERT_TRUE(t.count(k16 + "/decoder/rnn/Constant_53_output_0"));
  EXPECT_EQ(t.at(k16 + "/decoder/rnn/Constant_53_output_0").data<int64_t>()[0], 0);
  EXPECT_EQ(t.at(k16 + "self.stft.hop_length").data<int64_t>()[0], 128);
}

TEST(OnnxWeights, InitializersConstantsAndEncodings) {
  const std::string dir = test::scratch_dir("onnx_encodings");
  Proto ints;  // i64, packed
  ints.varint(kTensorDims, 3).varint(kTensorDataType, kInt64).str(kTensorName, "ints");
  ints.str(kTensorInt64Data, Proto::varint_bytes(uint64_t(-3)) + Proto::varint_bytes(1ull << 40) + Proto::varint_bytes(0));
  Proto ints_unpacked;
  ints_unpacked.varint(kTensorDims, 2).varint(kTensorDataType, kInt64).str(kTensorName, "ints_unpacked");
  ints_unpacked.varint(kTensorInt64Data, 7).varint(kTensorInt64Data, uint64_t(-1));
  Proto dbl;  // another dtype: skipped, not an error
  dbl.varint(kTensorDims, 1).varint(kTensorDataType, kDouble).str(kTensorName, "double");
  dbl.str(kTensorDoubleData, std::string(8, '\0'));
  Proto late_type;  // data_type after the data: fields come in any order
  late_type.str(kTensorName, "late").varint(kTensorDims, 1).fixed32(kTensorFloatData, 2.5f).varint(kTensorDataType, kFloat);
  Proto scalar = float_tensor("", {}, {9.5f});

  Proto graph;
  graph.msg(kGraphInitializer, float_tensor("raw", {2, 2}, {1, 2, 3, 4}, Encoding::raw))
      .msg(kGraphInitializer, float_tensor("packed", {3}, {5, 6, 7}, Encoding::packed))
      .msg(kGraphInitializer, float_tensor("unpacked", {1, 2}, {-1, 0.5f}, Encoding::unpacked))
      .msg(kGraphInitializer, ints)
      .msg(kGraphInitializer, ints_unpacked)
      .msg(kGraphInitializer, dbl)
      .msg(kGraphInitializer, late_type)
      .msg(kGraphInitializer, float_tensor("empty", {0, 4}, {}))
      .msg(kGraphNode, constant_node("const_scalar", scalar))
      // Constant's opset-12 forms, and a node of another kind whose tensor attribute is no weight.
      .msg(kGraphNode, Proto().str(kNodeOpType, "Constant").str(kNodeOutput, "const_float").msg(
                           kNodeAttribute, Proto().str(kAttrName, "value_float").fixed32(kAttrF, 0.25f)))
      .msg(kGraphNode, Proto().str(kNodeOpType, "Constant").str(kNodeOutput, "const_int").msg(
                           kNodeAttribute, Proto().str(kAttrName, "value_int").varint(kAttrI, uint64_t(-5))))
      .msg(kGraphNode, Proto().str(kNodeOpType, "Constant").str(kNodeOutput, "const_ints").msg(
                           kNodeAttribute, Proto().str(kAttrName, "value_ints").varint(kAttrInts, 4).varint(kAttrInts, 5)))
      .msg(kGraphNode, Proto().str(kNodeOpType, "Constant").str(kNodeOutput, "const_floats").msg(
                           kNodeAttribute, Proto().str(kAttrName, "value_floats").str(kAttrFloats, std::string("\0\0\x80\x3f", 4))))
      .msg(kGraphNode, Proto().str(kNodeOpType, "ConstantOfShape").str(kNodeOutput, "cos").msg(
                           kNodeAttribute, attribute("value", kAttrT, float_tensor("", {1}, {0}))));

  Result<OnnxWeights> w = read_onnx_weights(write_bytes(dir, "m.onnx", model(graph).bytes));
  ASSERT_TRUE(w.has_value()) << w.status().to_string();
  EXPECT_EQ(w->ir_version, 8);
  EXPECT_EQ(w->opset, 16);  // the default domain's, not ai.onnx.ml's
  EXPECT_EQ(w->producer, "prism-test");
  const auto& t = w->tensors;
  EXPECT_EQ(t.size(), 12u);
  EXPECT_EQ(t.at("raw").shape(), (Dims{2, 2}));
  EXPECT_EQ(values_of(t.at("raw")), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(values_of(t.at("packed")), (std::vector<float>{5, 6, 7}));
  EXPECT_EQ(values_of(t.at("unpacked")), (std::vector<float>{-1, 0.5f}));
  EXPECT_EQ(t.at("unpacked").shape(), (Dims{1, 2}));
  ASSERT_EQ(t.at("ints").dtype(), DType::i64);
  EXPECT_EQ(t.at("ints").data<int64_t>()[0], -3);
  EXPECT_EQ(t.at("ints").data<int64_t>()[1], 1ll << 40);
  EXPECT_EQ(t.at("ints_unpacked").data<int64_t>()[1], -1);
  EXPECT_FALSE(t.count("double"));
  EXPECT_EQ(values_of(t.at("late")), (std::vector<float>{2.5f}));
  EXPECT_EQ(t.at("empty").shape(), (Dims{0, 4}));
  EXPECT_EQ(t.at("const_scalar").dim(), 0);
  EXPECT_EQ(values_of(t.at("const_scalar")), (std::vector<float>{9.5f}));
  EXPECT_EQ(values_of(t.at("const_float")), (std::vector<float>{0.25f}));
  EXPECT_EQ(t.at("const_int").data<int64_t>()[0], -5);
  EXPECT_EQ(t.at("const_ints").shape(), (Dims{2}));
  EXPECT_EQ(t.at("const_ints").data<int64_t>()[1], 5);
  EXPECT_EQ(values_of(t.at("const_floats")), (std::vector<float>{1.0f}));
  EXPECT_FALSE(t.count("cos"));
}

TEST(OnnxWeights, WalksIfAndLoopBodiesAtAnyDepth) {
  const std::string dir = test::scratch_dir("onnx_subgraphs");
  // Loop body holding an If whose else branch holds an initializer and a Constant.
  Proto inner_else;
  inner_else.msg(kGraphInitializer, float_tensor("deep_init", {1}, {3}))
      .msg(kGraphNode, constant_node("deep_const", float_tensor("", {2}, {1, 2}, Encoding::packed)));
  Proto inner_then;
  inner_then.msg(kGraphNode, constant_node("then_const", float_tensor("", {1}, {7})));
  Proto body;
  body.msg(kGraphNode, Proto()
                           .str(kNodeOpType, "If")
                           .msg(kNodeAttribute, attribute("else_branch", kAttrG, inner_else).varint(kAttrType, 5))
                           .msg(kNodeAttribute, attribute("then_branch", kAttrG, inner_then)));
  Proto graph;
  graph.msg(kGraphNode, Proto().str(kNodeOpType, "Loop").msg(kNodeAttribute, attribute("body", kAttrG, body)));
  // A GRAPHS attribute (as custom ops carry) is walked too.
  graph.msg(kGraphNode, Proto()
                            .str(kNodeOpType, "Custom")
                            .str(kNodeDomain, "example")
                            .msg(kNodeAttribute, attribute("bodies", kAttrGraphs,
                                                           Proto().msg(kGraphInitializer, float_tensor("listed", {1}, {8})))));

  Result<OnnxWeights> w = read_onnx_weights(write_bytes(dir, "m.onnx", model(graph).bytes));
  ASSERT_TRUE(w.has_value()) << w.status().to_string();
  EXPECT_EQ(values_of(w->tensors.at("deep_init")), (std::vector<float>{3}));
  EXPECT_EQ(values_of(w->tensors.at("deep_const")), (std::vector<float>{1, 2}));
  EXPECT_EQ(values_of(w->tensors.at("then_const")), (std::vector<float>{7}));
  EXPECT_EQ(values_of(w->tensors.at("listed")), (std::vector<float>{8}));
}

TEST(OnnxWeights, NestingBeyondTheLimitIsCorrupt) {
  const std::string dir = test::scratch_dir("onnx_deep");
  Proto g;
  for (int i = 0; i < 70; ++i) g = Proto().msg(kGraphNode, Proto().str(kNodeOpType, "If").msg(kNodeAttribute, attribute("then_branch", kAttrG, g)));
  Result<OnnxWeights> w = read_onnx_weights(write_bytes(dir, "m.onnx", model(g).bytes));
  ASSERT_FALSE(w.has_value());
  EXPECT_THAT(w.status().message(), HasSubstr("nest deeper than 64"));
}

TEST(OnnxWeights, MissingAndNonOnnxFiles) {
  const std::string dir = test::scratch_dir("onnx_bad_files");
  Result<OnnxWeights> w = read_onnx_weights(dir + "/nope.onnx");
  ASSERT_FALSE(w.has_value());
  EXPECT_EQ(w.status().code(), StatusCode::not_found);
  EXPECT_THAT(w.status().message(), HasSubstr("nope.onnx"));

  for (const std::string& bytes : {std::string(), std::string("hello, this is text\n"), std::string("\xff\xff\xff\xff\x0f", 5)}) {
    w = read_onnx_weights(write_bytes(dir, "bad.onnx", bytes));
    ASSERT_FALSE(w.has_value());
    EXPECT_EQ(w.status().code(), StatusCode::invalid_argument);
    EXPECT_THAT(w.status().message(), HasSubstr("is not an ONNX model"));
  }
  w = read_onnx_weights(dir);  // a directory
  ASSERT_FALSE(w.has_value());
  EXPECT_THAT(w.status().message(), HasSubstr("is not an ONNX model"));
}

TEST(OnnxWeights, RefusesFilesOverOneGiBBeforeReadingThem) {
  const std::string dir = test::scratch_dir("onnx_huge");
  const std::string path = write_bytes(dir, "huge.onnx", "x");
  ASSERT_EQ(::truncate(path.c_str(), (1ll << 30) + 1), 0);  // sparse: no disk used
  Result<OnnxWeights> w = read_onnx_weights(path);
  ASSERT_FALSE(w.has_value());
  EXPECT_EQ(w.status().code(), StatusCode::invalid_argument);
  EXPECT_THAT(w.status().message(), HasSubstr("more than the limit of 1 GiB"));
}

TEST(OnnxWeights, CorruptFilesAreInvalidArgument) {
  const std::string dir = test::scratch_dir("onnx_corrupt");
  auto in_graph = [](const Proto& tensor) { return model(Proto().msg(kGraphInitializer, tensor)).bytes; };
  std::string raw_short = in_graph(float_tensor("w", {4}, {1, 2, 3}));
  Proto odd = float_tensor("w", {1}, {});
  odd.str(kTensorRawData, "12345");
  Proto huge;
  huge.varint(kTensorDims, 1 << 20).varint(kTensorDims, 1 << 20).varint(kTensorDataType, kFloat).str(kTensorName, "w");
  Proto negative;
  negative.varint(kTensorDims, uint64_t(-1)).varint(kTensorDataType, kFloat).str(kTensorName, "w").str(kTensorRawData, "");
  Proto external;
  external.varint(kTensorDims, 1).varint(kTensorDataType, kFloat).str(kTensorName, "w").varint(kTensorDataLocation, 1);
  Proto seven_dims;
  for (int i = 0; i < 7; ++i) seven_dims.varint(kTensorDims, 1);
  seven_dims.varint(kTensorDataType, kFloat).str(kTensorName, "w").str(kTensorRawData, "1234");
  Proto bad_packed = float_tensor("w", {1}, {});
  bad_packed.str(kTensorFloatData, "123");
  const std::string twice =
      model(Proto().msg(kGraphInitializer, float_tensor("w", {1}, {1})).msg(kGraphNode, constant_node("w", float_tensor("", {1}, {2}))))
          .bytes;
  // A node whose bytes end inside a field.
  std::string truncated_node = model(Proto().str(kGraphNode, Proto().str(kNodeOpType, "Constant").bytes.substr(0, 4))).bytes;

  const std::vector<std::pair<std::string, std::string>> cases = {
      {raw_short, "tensor 'w' holds 3 values for shape [4]"},
      {in_graph(odd), "tensor 'w' holds 1 values for shape [1]"},
      {in_graph(float_tensor("w", {2, 3}, {1, 2}, Encoding::packed)), "tensor 'w' holds 2 values for shape [2, 3]"},
      {in_graph(float_tensor("w", {2}, {1, 2, 3}, Encoding::unpacked)), "tensor 'w' holds 3 values for shape [2]"},
      {in_graph(huge), "tensor 'w' has an invalid shape"},
      {in_graph(negative), "tensor 'w' has an invalid shape"},
      {in_graph(seven_dims), "tensor 'w' has more than 6 dimensions"},
      {in_graph(bad_packed), "tensor 'w' has malformed bytes"},
      {in_graph(external), "external file"},
      {twice, "tensor 'w' is defined twice"},
      {truncated_node, "is corrupt: a node's bytes are malformed"},
  };
  for (const auto& [bytes, message] : cases) {
    Result<OnnxWeights> w = read_onnx_weights(write_bytes(dir, "m.onnx", bytes));
    ASSERT_FALSE(w.has_value()) << message;
    EXPECT_EQ(w.status().code(), StatusCode::invalid_argument) << message;
    EXPECT_THAT(w.status().message(), HasSubstr(message));
    EXPECT_THAT(w.status().message(), HasSubstr("m.onnx")) << message;
  }
}

TEST(OnnxWeights, EveryTruncationOfTheRealFileFailsCleanly) {
  // Cut the real file at many points: each prefix is refused (or, where the cut falls between
  // top-level fields after the graph, read) without a crash.
  std::ifstream f(silero_path(), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 1000u);
  const std::string dir = test::scratch_dir("onnx_truncated");
  for (size_t cut : {size_t(1), size_t(7), size_t(100), bytes.size() / 3, bytes.size() / 2, bytes.size() - 1}) {
    Result<OnnxWeights> w = read_onnx_weights(write_bytes(dir, "cut.onnx", bytes.substr(0, cut)));
    if (!w.has_value()) EXPECT_EQ(w.status().code(), StatusCode::invalid_argument) << cut;
  }
}

TEST(OnnxWeights, MutatedFilesNeverCrash) {
  // A small model with every kind of field, its bytes flipped, cut and spliced at random:
  // each read ends in a value or an invalid_argument.
  Proto then_branch;
  then_branch.msg(kGraphNode, constant_node("c", float_tensor("", {2}, {1, 2}, Encoding::packed)));
  Proto graph;
  graph.msg(kGraphInitializer, float_tensor("w", {2, 2}, {1, 2, 3, 4}))
      .msg(kGraphInitializer, float_tensor("u", {2}, {5, 6}, Encoding::unpacked))
      .msg(kGraphNode, Proto().str(kNodeOpType, "If").msg(kNodeAttribute, attribute("then_branch", kAttrG, then_branch)));
  const std::string good = model(graph).bytes;
  const std::string dir = test::scratch_dir("onnx_mutated");
  std::mt19937 rng(11);
  int read = 0, refused = 0;
  for (int i = 0; i < 500; ++i) {
    std::string bytes = good;
    const int edits = 1 + int(rng() % 4);
    for (int e = 0; e < edits && !bytes.empty(); ++e) {
      const size_t at = rng() % bytes.size();
      switch (rng() % 4) {
        case 0: bytes[at] = char(rng()); break;
        case 1: bytes[at] ^= char(1 << (rng() % 8)); break;
        case 2: bytes.resize(at); break;
        default: bytes.insert(at, 1, char(rng())); break;
      }
    }
    Result<OnnxWeights> w = read_onnx_weights(write_bytes(dir, "m.onnx", bytes));
    if (w.has_value()) {
      ++read;
    } else {
      ++refused;
      ASSERT_EQ(w.status().code(), StatusCode::invalid_argument) << w.status().to_string();
    }
  }
  EXPECT_GT(read, 0);
  EXPECT_GT(refused, 0);
}

}  // namespace
}  // namespace prism::formats
