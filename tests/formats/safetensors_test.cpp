// safetensors reader and writer against files whose bytes are built by hand here from the
// format's spec (8-byte little-endian header length, JSON header, raw data): the independent
// check, since this Python has no `safetensors` package. Every malformed input is its own
// test and must end in a Status naming the file and the tensor, never a crash.
#include "formats/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <random>

#include "test_util/paths.h"

namespace prism::formats {
namespace {

using ::testing::HasSubstr;

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  std::memcpy(s.data(), &v, 8);
  return s;
}

template <class T>
std::string raw(std::initializer_list<T> values) {
  std::string s(values.size() * sizeof(T), '\0');
  std::memcpy(s.data(), values.begin(), s.size());
  return s;
}

// A file as the spec lays it out; the header padded with spaces to a multiple of 8 as HF does.
std::string st_bytes(std::string header, const std::string& data, bool pad = true) {
  if (pad) header.append((8 - header.size() % 8) % 8, ' ');
  return le64(header.size()) + header + data;
}

std::string write_file(const std::string& dir, const std::string& name, const std::string& bytes) {
  const std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
  return path;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::string bytes_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.raw_data()), c.nbytes());
}

// Opens `bytes` written to a scratch file and expects an error of `code` that names the file
// and contains each of `parts`.
void expect_open_error(const std::string& test, const std::string& bytes, StatusCode code,
                       std::initializer_list<std::string> parts) {
  const std::string path = write_file(test::scratch_dir("safetensors_" + test), "bad.safetensors", bytes);
  Result<std::shared_ptr<const SafetensorsFile>> f = SafetensorsFile::open(path);
  ASSERT_FALSE(f.has_value()) << test;
  EXPECT_EQ(f.status().code(), code) << f.status().to_string();
  EXPECT_THAT(f.status().message(), HasSubstr(path));
  for (const std::string& p : parts) EXPECT_THAT(f.status().message(), HasSubstr(p));
}

std::string one_tensor(const std::string& entry, const std::string& data) {
  return st_bytes("{\"t\":" + entry + "}", data);
}

TEST(Safetensors, HandBuiltFileReadsAsTheSpecSays) {
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"I32","shape":[3],"data_offsets":[8,20]},)"
      R"("a":{"dtype":"F32","shape":[2,1],"data_offsets":[0,8]}})";
  const std::string data = raw<float>({1.5f, -2.0f}) + raw<int32_t>({7, -8, 9});
  const std::string path =
      write_file(test::scratch_dir("safetensors_hand"), "m.safetensors", st_bytes(header, data));

  Result<std::shared_ptr<const SafetensorsFile>> f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.has_value()) << f.status().to_string();
  const SafetensorsFile& file = **f;
  EXPECT_EQ(file.path(), path);
  EXPECT_EQ(file.names(), (std::vector<std::string>{"a", "b"}));  // by offset
  EXPECT_EQ(file.metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  EXPECT_TRUE(file.contains("a"));
  EXPECT_FALSE(file.contains("__metadata__"));

  Result<Tensor> a = file.get("a");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->dtype(), DType::f32);
  EXPECT_EQ(a->shape(), (Dims{2, 1}));
  EXPECT_EQ(a->data<float>()[0], 1.5f);
  EXPECT_EQ(a->data<float>()[1], -2.0f);
  Result<Tensor> b = file.get("b");
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->dtype(), DType::i32);
  EXPECT_EQ(b->shape(), (Dims{3}));
  EXPECT_EQ(bytes_of(*b), raw<int32_t>({7, -8, 9}));

  // Zero-copy: both views alias one mapping, 8 bytes apart as the offsets say.
  EXPECT_NE(a->owner(), nullptr);
  EXPECT_EQ(a->owner(), b->owner());
  EXPECT_EQ(static_cast<char*>(b->raw_data()) - static_cast<char*>(a->raw_data()), 8);
  EXPECT_EQ(file.get("a")->raw_data(), a->raw_data());
}

TEST(Safetensors, WriterProducesTheSpecBytes) {
  const std::string dir = test::scratch_dir("safetensors_writer_bytes");
  const Tensor b = Tensor::from<int32_t>({7, -8, 9}, {3});
  const Tensor a = Tensor::from<float>({1.5f, -2.0f}, {2, 1});
  ASSERT_TRUE(write_safetensors(dir + "/w.safetensors", {{"b", b}, {"a", a}}, {{"format", "pt"}}).ok());

  // Given order, offsets relative to the data section, header padded with spaces to 8.
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"I32","shape":[3],"data_offsets":[0,12]},)"
      R"("a":{"dtype":"F32","shape":[2,1],"data_offsets":[12,20]}})";
  const std::string expected = st_bytes(header, raw<int32_t>({7, -8, 9}) + raw<float>({1.5f, -2.0f}));
  const std::string got = read_file(dir + "/w.safetensors");
  EXPECT_EQ(got, expected);
  EXPECT_EQ((got.size() - 20) % 8, 0u);
  uint64_t n;
  std::memcpy(&n, got.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(got[8 + n - 1] == ' ' || got[8 + n - 1] == '}', true);
}

TEST(Safetensors, WriterOmitsEmptyMetadata) {
  const std::string dir = test::scratch_dir("safetensors_writer_nometa");
  ASSERT_TRUE(write_safetensors(dir + "/w.safetensors", {{"x", Tensor::from<uint8_t>({1, 2}, {2})}}).ok());
  EXPECT_EQ(read_file(dir + "/w.safetensors"),
            st_bytes(R"({"x":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", std::string("\x01\x02", 2)));
}

TEST(Safetensors, RoundTripsEveryDtypeByteForByte) {
  const std::string dir = test::scratch_dir("safetensors_roundtrip");
  std::mt19937 rng(7);
  std::vector<std::pair<std::string, Tensor>> tensors;
  // Largest elements first so every tensor stays aligned and is read zero-copy.
  const std::vector<std::pair<DType, Dims>> specs = {
      {DType::i64, {3, 2}}, {DType::f32, {2, 3, 4}}, {DType::i32, {5}},
      {DType::f32, {}},     {DType::bf16, {4, 4}},   {DType::f16, {1, 7}},
      {DType::i8, {9}},     {DType::u8, {0, 3}},     {DType::f8_e4m3, {2, 5}}};
  for (size_t i = 0; i < specs.size(); ++i) {
    Tensor t = Tensor::empty(specs[i].second, specs[i].first);
    auto* p = static_cast<uint8_t*>(t.raw_data());
    for (size_t j = 0; j < t.nbytes(); ++j) p[j] = uint8_t(rng());
    tensors.push_back({"layer." + std::to_string(i) + "." + std::string(dtype_name(specs[i].first)), t});
  }
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "quote \" and ü"}};
  const std::string path = dir + "/all.safetensors";
  ASSERT_TRUE(write_safetensors(path, tensors, meta).ok());

  Result<std::shared_ptr<const SafetensorsFile>> f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.has_value()) << f.status().to_string();
  EXPECT_EQ((*f)->metadata(), meta);
  ASSERT_EQ((*f)->names().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    EXPECT_EQ((*f)->names()[i], name);  // written in the given order
    Result<Tensor> r = (*f)->get(name);
    ASSERT_TRUE(r.has_value()) << name;
    EXPECT_EQ(r->dtype(), t.dtype()) << name;
    EXPECT_EQ(r->shape(), t.shape()) << name;
    EXPECT_EQ(bytes_of(*r), bytes_of(t)) << name;
    EXPECT_EQ(r->owner(), (*f)->get(tensors[0].first)->owner()) << name << " should be zero-copy";
  }
}

TEST(Safetensors, WriterWritesStridedTensorsContiguous) {
  const std::string dir = test::scratch_dir("safetensors_strided");
  const Tensor t = Tensor::from<float>({1, 2, 3, 4, 5, 6}, {2, 3}).transpose(0, 1);  // [3, 2]
  ASSERT_TRUE(write_safetensors(dir + "/t.safetensors", {{"t", t}}).ok());
  auto f = SafetensorsFile::open(dir + "/t.safetensors");
  ASSERT_TRUE(f.has_value());
  Result<Tensor> r = (*f)->get("t");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->shape(), (Dims{3, 2}));
  EXPECT_EQ(bytes_of(*r), raw<float>({1, 4, 2, 5, 3, 6}));
}

TEST(Safetensors, WriterRefusesBadInput) {
  const std::string dir = test::scratch_dir("safetensors_writer_bad");
  const Tensor t = Tensor::from<float>({1}, {1});
  Status dup = write_safetensors(dir + "/d.safetensors", {{"x", t}, {"x", t}});
  EXPECT_EQ(dup.code(), StatusCode::invalid_argument);
  EXPECT_THAT(dup.message(), HasSubstr("'x' given twice"));
  EXPECT_FALSE(write_safetensors(dir + "/u.safetensors", {{"x", Tensor()}}).ok());
  EXPECT_FALSE(write_safetensors(dir + "/m.safetensors", {{"__metadata__", t}}).ok());
  EXPECT_FALSE(write_safetensors(dir + "/utf.safetensors", {{"bad\xff", t}}).ok());
  EXPECT_FALSE(write_safetensors(dir + "/no/such/dir/x.safetensors", {{"x", t}}).ok());
}

TEST(Safetensors, TensorsOutliveTheFileObject) {
  const std::string dir = test::scratch_dir("safetensors_outlive");
  ASSERT_TRUE(write_safetensors(dir + "/m.safetensors", {{"w", Tensor::from<float>({3, 4}, {2})}}).ok());
  Tensor w;
  {
    auto f = SafetensorsFile::open(dir + "/m.safetensors");
    ASSERT_TRUE(f.has_value());
    w = *(*f)->get("w");
  }  // the file object is gone; the mapping lives on in w
  EXPECT_EQ(w.data<float>()[0], 3.0f);
  EXPECT_EQ(w.data<float>()[1], 4.0f);
}

TEST(Safetensors, MisalignedDataIsCopiedIntoAlignedMemory) {
  // One byte of u8 puts the f32 at data offset 1: legal in the format, misaligned for floats.
  const std::string header = R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[1,9]}})";
  const std::string path = write_file(test::scratch_dir("safetensors_misaligned"), "m.safetensors",
                                      st_bytes(header, "\x05" + raw<float>({0.25f, -8.0f})));
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.has_value()) << f.status().to_string();
  Result<Tensor> b = (*f)->get("b");
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b->raw_data()) % alignof(float), 0u);
  EXPECT_EQ(b->data<float>()[0], 0.25f);
  EXPECT_EQ(b->data<float>()[1], -8.0f);
  EXPECT_NE(b->owner(), (*f)->get("a")->owner());  // a copy, not the mapping
}

TEST(Safetensors, ZeroSizedTensorsAndEmptyHeader) {
  const std::string dir = test::scratch_dir("safetensors_empty");
  const std::string header = R"({"e":{"dtype":"F32","shape":[0,4],"data_offsets":[0,0]},)"
                             R"("f":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  auto f = SafetensorsFile::open(write_file(dir, "z.safetensors", st_bytes(header, raw<float>({1}))));
  ASSERT_TRUE(f.has_value()) << f.status().to_string();
  EXPECT_EQ((*f)->get("e")->numel(), 0);
  auto g = SafetensorsFile::open(write_file(dir, "n.safetensors", st_bytes("{}", "")));
  ASSERT_TRUE(g.has_value()) << g.status().to_string();
  EXPECT_TRUE((*g)->names().empty());
}

TEST(Safetensors, GetUnknownTensorNamesItAndTheFile) {
  const std::string dir = test::scratch_dir("safetensors_unknown_tensor");
  ASSERT_TRUE(write_safetensors(dir + "/m.safetensors", {{"w", Tensor::from<float>({1}, {1})}}).ok());
  auto f = SafetensorsFile::open(dir + "/m.safetensors");
  ASSERT_TRUE(f.has_value());
  Result<Tensor> r = (*f)->get("nope");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.status().code(), StatusCode::not_found);
  EXPECT_THAT(r.status().message(), HasSubstr("'nope'"));
  EXPECT_THAT(r.status().message(), HasSubstr(dir + "/m.safetensors"));
}

TEST(Safetensors, DtypeNames) {
  for (DType d :
       {DType::f32, DType::bf16, DType::f16, DType::i8, DType::u8, DType::i32, DType::i64, DType::f8_e4m3}) {
    Result<DType> back = parse_safetensors_dtype(safetensors_dtype_name(d));
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(*back, d);
  }
  EXPECT_EQ(safetensors_dtype_name(DType::f8_e4m3), "F8_E4M3");
  EXPECT_EQ(parse_safetensors_dtype("BOOL").status().code(), StatusCode::unimplemented);
  EXPECT_EQ(parse_safetensors_dtype("f32").status().code(), StatusCode::invalid_argument);
}

// ---- malformed files: one test each ----

TEST(SafetensorsErrors, MissingFile) {
  const std::string path = test::scratch_dir("safetensors_missing") + "/none.safetensors";
  auto f = SafetensorsFile::open(path);
  ASSERT_FALSE(f.has_value());
  EXPECT_EQ(f.status().code(), StatusCode::not_found);
  EXPECT_THAT(f.status().message(), HasSubstr(path));
}

TEST(SafetensorsErrors, DirectoryIsNotAFile) {
  const std::string dir = test::scratch_dir("safetensors_dir");
  auto f = SafetensorsFile::open(dir);
  ASSERT_FALSE(f.has_value());
  EXPECT_THAT(f.status().message(), HasSubstr("not a regular file"));
}

TEST(SafetensorsErrors, EmptyFile) {
  expect_open_error("empty", "", StatusCode::data_loss, {"0 bytes", "truncated"});
}

TEST(SafetensorsErrors, ShorterThanEightBytes) {
  expect_open_error("short", std::string("\x10\0\0\0\0", 5), StatusCode::data_loss, {"5 bytes", "truncated"});
}

TEST(SafetensorsErrors, HeaderLengthPastEndOfFile) {
  expect_open_error("header_past_eof", le64(64) + "{}", StatusCode::data_loss,
                    {"header length 64", "truncated"});
}

TEST(SafetensorsErrors, OversizedHeader) {
  expect_open_error("oversized", le64(200'000'000) + "{}", StatusCode::invalid_argument,
                    {"200000000", "limit"});
  expect_open_error("oversized_u64", le64(~0ull) + "{}", StatusCode::invalid_argument, {"limit"});
}

TEST(SafetensorsErrors, DataShorterThanLastOffset) {
  expect_open_error("data_short",
                    one_tensor(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})", raw<float>({1})),
                    StatusCode::data_loss, {"'t'", "past the data section", "truncated"});
}

TEST(SafetensorsErrors, HeaderNotJson) {
  expect_open_error("not_json", st_bytes("{\"t\": [", ""), StatusCode::invalid_argument, {"not valid JSON"});
}

TEST(SafetensorsErrors, HeaderNotValidUtf8) {
  expect_open_error("bad_utf8", st_bytes("{\"t\xff\xfe\":{}}", ""), StatusCode::invalid_argument,
                    {"not valid JSON"});
}

TEST(SafetensorsErrors, HeaderNotAnObject) {
  expect_open_error("not_object", st_bytes("[1, 2]", ""), StatusCode::invalid_argument,
                    {"must be a JSON object", "array"});
}

TEST(SafetensorsErrors, EntryNotAnObject) {
  expect_open_error("entry_not_object", one_tensor("3", ""), StatusCode::invalid_argument,
                    {"'t'", "must be an object"});
}

TEST(SafetensorsErrors, EntryMissingDtype) {
  expect_open_error("missing_dtype", one_tensor(R"({"shape":[1],"data_offsets":[0,4]})", raw<float>({1})),
                    StatusCode::invalid_argument, {"'t'", "missing 'dtype'"});
}

TEST(SafetensorsErrors, EntryMissingShape) {
  expect_open_error("missing_shape", one_tensor(R"({"dtype":"F32","data_offsets":[0,4]})", raw<float>({1})),
                    StatusCode::invalid_argument, {"'t'", "missing 'shape'"});
}

TEST(SafetensorsErrors, EntryMissingDataOffsets) {
  expect_open_error("missing_offsets", one_tensor(R"({"dtype":"F32","shape":[1]})", raw<float>({1})),
                    StatusCode::invalid_argument, {"'t'", "missing 'data_offsets'"});
}

TEST(SafetensorsErrors, DtypeNotAString) {
  expect_open_error("dtype_type",
                    one_tensor(R"({"dtype":7,"shape":[1],"data_offsets":[0,4]})", raw<float>({1})),
                    StatusCode::invalid_argument, {"'t'", "'dtype' must be a string"});
}

TEST(SafetensorsErrors, ShapeNotAnArray) {
  expect_open_error("shape_type",
                    one_tensor(R"({"dtype":"F32","shape":"1","data_offsets":[0,4]})", raw<float>({1})),
                    StatusCode::invalid_argument, {"'t'", "'shape' must be an array"});
}

TEST(SafetensorsErrors, ShapeWithNonIntegers) {
  expect_open_error("shape_float",
                    one_tensor(R"({"dtype":"F32","shape":[1.0],"data_offsets":[0,4]})", raw<float>({1})),
                    StatusCode::invalid_argument, {"'t'", "non-negative integers"});
}

TEST(SafetensorsErrors, NegativeDimension) {
  expect_open_error("negative_dim",
                    one_tensor(R"({"dtype":"F32","shape":[-1],"data_offsets":[0,4]})", raw<float>({1})),
                    StatusCode::invalid_argument, {"'t'", "non-negative integers", "[-1]"});
}

TEST(SafetensorsErrors, TooManyDimensions) {
  expect_open_error(
      "too_many_dims",
      one_tensor(R"({"dtype":"F32","shape":[1,1,1,1,1,1,1],"data_offsets":[0,4]})", raw<float>({1})),
      StatusCode::unimplemented, {"'t'", "7 dimensions"});
}

TEST(SafetensorsErrors, DataOffsetsWrongType) {
  expect_open_error("offsets_type",
                    one_tensor(R"({"dtype":"F32","shape":[1],"data_offsets":{"b":0}})", raw<float>({1})),
                    StatusCode::invalid_argument, {"'t'", "'data_offsets' must be an array"});
  expect_open_error("offsets_len",
                    one_tensor(R"({"dtype":"F32","shape":[1],"data_offsets":[0]})", raw<float>({1})),
                    StatusCode::invalid_argument, {"'t'", "'data_offsets' must be an array"});
  expect_open_error("offsets_str",
                    one_tensor(R"({"dtype":"F32","shape":[1],"data_offsets":["0",4]})", raw<float>({1})),
                    StatusCode::invalid_argument, {"'t'", "non-negative integers"});
}

TEST(SafetensorsErrors, DataOffsetsBeginAfterEnd) {
  expect_open_error("begin_after_end",
                    one_tensor(R"({"dtype":"F32","shape":[1],"data_offsets":[4,0]})", raw<float>({1, 2})),
                    StatusCode::invalid_argument, {"'t'", "begin after end"});
}

TEST(SafetensorsErrors, DataOffsetsEndPastData) {
  expect_open_error(
      "end_past_data",
      one_tensor(R"({"dtype":"F32","shape":[1],"data_offsets":[18446744073709551612,18446744073709551615]})",
                 ""),
      StatusCode::invalid_argument, {"'t'", "non-negative integers"});
  expect_open_error("end_past_data2",
                    one_tensor(R"({"dtype":"F32","shape":[1],"data_offsets":[8,12]})", raw<float>({1, 2})),
                    StatusCode::data_loss, {"'t'", "past the data section (8 bytes)"});
}

TEST(SafetensorsErrors, OverlappingOffsets) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  expect_open_error("overlap", st_bytes(header, raw<float>({1, 2, 3})), StatusCode::invalid_argument,
                    {"'a' [0, 8)", "'b' [4, 12)", "overlap"});
}

TEST(SafetensorsErrors, UnknownDtype) {
  expect_open_error("unknown_dtype", one_tensor(R"({"dtype":"Q7","shape":[1],"data_offsets":[0,1]})", "x"),
                    StatusCode::invalid_argument, {"unknown dtype 'Q7' for tensor 't'"});
}

TEST(SafetensorsErrors, UnsupportedDtypes) {
  for (const std::string dt : {"BOOL", "F64", "I16", "U64"}) {
    expect_open_error("unsupported_" + dt,
                      one_tensor(R"({"dtype":")" + dt + R"(","shape":[1],"data_offsets":[0,8]})", le64(0)),
                      StatusCode::unimplemented, {"unsupported dtype '" + dt + "' for tensor 't'"});
  }
}

TEST(SafetensorsErrors, ShapeDisagreesWithByteLength) {
  expect_open_error("shape_bytes",
                    one_tensor(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})", raw<float>({1, 2})),
                    StatusCode::invalid_argument, {"'t'", "[3]", "needs 12 bytes", "hold 8"});
}

TEST(SafetensorsErrors, ShapeWhoseSizeOverflows) {
  expect_open_error(
      "shape_overflow",
      one_tensor(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]})", raw<float>({1})),
      StatusCode::invalid_argument, {"'t'", "more than 2^64"});
}

TEST(SafetensorsErrors, DuplicateTensorName) {
  const std::string header = R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                             R"("t":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})";
  expect_open_error("duplicate", st_bytes(header, "ab"), StatusCode::invalid_argument, {"'t' twice"});
}

TEST(SafetensorsErrors, MetadataValuesMustBeStrings) {
  expect_open_error("metadata_type", st_bytes(R"({"__metadata__":{"step":3}})", ""),
                    StatusCode::invalid_argument, {"'__metadata__'", "'step'", "must be a string"});
  expect_open_error("metadata_object", st_bytes(R"({"__metadata__":[]})", ""), StatusCode::invalid_argument,
                    {"'__metadata__' must be an object"});
}

// Every prefix of a valid file is truncated somewhere, so each must be an error; random
// byte flips may yield a valid file or an error, never a crash.
TEST(SafetensorsErrors, EveryTruncationAndRandomCorruptionIsAStatus) {
  const std::string dir = test::scratch_dir("safetensors_fuzz");
  const std::string header =
      R"({"__metadata__":{"k":"v"},"a":{"dtype":"F32","shape":[2,1],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"BF16","shape":[3],"data_offsets":[8,14]}})";
  const std::string good = st_bytes(header, raw<float>({1, 2}) + raw<uint16_t>({1, 2, 3}));
  ASSERT_TRUE(SafetensorsFile::open(write_file(dir, "good.safetensors", good)).has_value());
  for (size_t n = 0; n < good.size(); ++n) {
    auto f = SafetensorsFile::open(write_file(dir, "cut.safetensors", good.substr(0, n)));
    EXPECT_FALSE(f.has_value()) << "prefix of " << n << " bytes";
  }
  std::mt19937 rng(1);
  for (int i = 0; i < 300; ++i) {
    std::string bad = good;
    for (int k = 0; k < 3; ++k) bad[rng() % (8 + header.size())] = char(rng());
    auto f = SafetensorsFile::open(write_file(dir, "flip.safetensors", bad));
    if (f.has_value())
      for (const std::string& name : (*f)->names()) EXPECT_TRUE((*f)->get(name).has_value());
  }
}

}  // namespace
}  // namespace prism::formats
