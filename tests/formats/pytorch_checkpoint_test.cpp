// PytorchCheckpoint: torch.save archives written by PyTorch itself (tests/reference/
// pytorch_checkpoint.py: every dtype, strided and shared views, nesting, a deflated re-zip,
// TorchScript and legacy files) read back bit for bit; the real TAEF2 weights through
// WeightSource; hand-made hostile or broken archives, each refused with a named error and
// nothing run; and a fuzz test: thousands of mutations of real archives (bytes flipped,
// fields overwritten, cuts, splices), of the whole file and of the pickle alone (re-zipped
// with a right CRC so the unpickler sees it), each of which must load or fail with a Status.
// PRISM_FUZZ_ITERATIONS raises the count (default 2000 per seed file).
#include "formats/pytorch_checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>

#include "base/file.h"
#include "formats/safetensors.h"
#include "test_util/paths.h"
#include "test_util/reference_io.h"

namespace prism::formats {
namespace {

using ::testing::HasSubstr;

std::string generated_dir() {
  Result<std::string> dir = test::generate_reference("pytorch_checkpoint.py", "pytorch_checkpoint");
  PRISM_CHECK_MSG(dir.has_value(), dir.status().to_string().c_str());
  return *dir;
}

std::string taesd_dir() { return test::testdata_dir() + "/taesd"; }

// Same dtype, shape and bytes.
void expect_identical(const Tensor& got, const Tensor& want, const std::string& name) {
  ASSERT_EQ(got.dtype(), want.dtype()) << name;
  ASSERT_EQ(got.shape(), want.shape()) << name << ": " << got.shape().to_string() << " vs " << want.shape().to_string();
  ASSERT_TRUE(got.is_contiguous()) << name;
  EXPECT_EQ(std::memcmp(got.raw_data(), want.contiguous().raw_data(), got.nbytes()), 0) << name;
}

// Every tensor the reference lists under "<tag>/" is in the checkpoint, identical, and the
// checkpoint holds no other.
void expect_matches_reference(const PytorchCheckpoint& ckpt, const std::string& tag) {
  Result<std::shared_ptr<const SafetensorsFile>> ref = test::open_reference(generated_dir());
  ASSERT_TRUE(ref.has_value()) << ref.status().to_string();
  std::vector<std::string> want;
  for (const std::string& name : (*ref)->names()) {
    if (name.rfind(tag + "/", 0) != 0) continue;
    const std::string key = name.substr(tag.size() + 1);
    want.push_back(key);
    Result<Tensor> got = ckpt.get(key);
    ASSERT_TRUE(got.has_value()) << got.status().to_string();
    expect_identical(*got, *(*ref)->get(name), key);
  }
  std::vector<std::string> have = ckpt.names();
  std::sort(have.begin(), have.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(have, want);
}

TEST(PytorchCheckpoint, ReadsEveryDtypeAndLayoutTorchSaveWrites) {
  Result<std::shared_ptr<const PytorchCheckpoint>> ckpt = PytorchCheckpoint::open(generated_dir() + "/mixed.pth");
  ASSERT_TRUE(ckpt.has_value()) << ckpt.status().to_string();
  expect_matches_reference(**ckpt, "mixed");
  // The names state dicts use: nested keys, int keys and list indices joined by '.'.
  for (const char* name : {"nested.inner.w", "nested.7", "list.0", "list.1.1", "param", "transposed", "bool"})
    EXPECT_TRUE((*ckpt)->contains(name)) << name;
  EXPECT_EQ((*ckpt)->get("bool")->dtype(), DType::u8);
  EXPECT_EQ((*ckpt)->get("scalar")->dim(), 0);
  EXPECT_FALSE((*ckpt)->contains("step"));  // not a tensor
  Result<Tensor> missing = (*ckpt)->get("nope");
  ASSERT_FALSE(missing.has_value());
  EXPECT_THAT(missing.status().message(), HasSubstr("'nope'"));
}

TEST(PytorchCheckpoint, ReadsANestedStateDict) {
  Result<std::shared_ptr<const PytorchCheckpoint>> ckpt = PytorchCheckpoint::open(generated_dir() + "/state_dict.pth");
  ASSERT_TRUE(ckpt.has_value()) << ckpt.status().to_string();
  expect_matches_reference(**ckpt, "state_dict");
  EXPECT_TRUE((*ckpt)->contains("state_dict.0.weight"));
}

TEST(PytorchCheckpoint, ReadsDeflatedEntries) {
  Result<std::shared_ptr<const PytorchCheckpoint>> ckpt = PytorchCheckpoint::open(generated_dir() + "/deflated.pth");
  ASSERT_TRUE(ckpt.has_value()) << ckpt.status().to_string();
  expect_matches_reference(**ckpt, "mixed");
}

TEST(PytorchCheckpoint, RefusesWhatIsNotAStateDict) {
  const std::string dir = generated_dir();
  Result<std::shared_ptr<const PytorchCheckpoint>> legacy = PytorchCheckpoint::open(dir + "/legacy.pth");
  ASSERT_FALSE(legacy.has_value());
  EXPECT_EQ(legacy.status().code(), StatusCode::unimplemented);
  EXPECT_THAT(legacy.status().message(), HasSubstr("legacy (PyTorch < 1.6)"));

  Result<std::shared_ptr<const PytorchCheckpoint>> scripted = PytorchCheckpoint::open(dir + "/scripted.pt");
  ASSERT_FALSE(scripted.has_value());
  EXPECT_THAT(scripted.status().message(), HasSubstr("pickle global '__torch__.Tiny' is not allowed in a weight file"));

  Result<std::shared_ptr<const PytorchCheckpoint>> f64 = PytorchCheckpoint::open(dir + "/float64.pth");
  ASSERT_FALSE(f64.has_value());
  EXPECT_EQ(f64.status().code(), StatusCode::unimplemented);
  EXPECT_THAT(f64.status().message(), HasSubstr("'torch.DoubleStorage' is not supported"));

  Result<std::shared_ptr<const PytorchCheckpoint>> absent = PytorchCheckpoint::open(dir + "/absent.pth");
  ASSERT_FALSE(absent.has_value());
  EXPECT_EQ(absent.status().code(), StatusCode::not_found);
}

TEST(PytorchCheckpoint, ReadsTheRealTaef2Weights) {
  for (const char* file : {"taef2_encoder.pth", "taef2_decoder.pth"}) {
    Result<std::shared_ptr<const PytorchCheckpoint>> ckpt = PytorchCheckpoint::open(taesd_dir() + "/" + file);
    ASSERT_TRUE(ckpt.has_value()) << ckpt.status().to_string();
    EXPECT_EQ((*ckpt)->names().size(), 79u) << file;
    EXPECT_EQ((*ckpt)->names().front(), file == std::string("taef2_encoder.pth") ? "0.weight" : "1.weight");
    for (const std::string& name : (*ckpt)->names()) EXPECT_EQ((*ckpt)->get(name)->dtype(), DType::f16) << name;
  }
  // Through WeightSource, as models load: shape-checked and widened to f32.
  Result<WeightSource> src = WeightSource::open(taesd_dir() + "/taef2_encoder.pth");
  ASSERT_TRUE(src.has_value()) << src.status().to_string();
  EXPECT_EQ(src->names().size(), 79u);
  EXPECT_TRUE(src->contains("13.pool.1.weight"));  // the flux_2 middle blocks' GroupNorm
  Result<Tensor> w = src->get("0.weight", {64, 3, 3, 3});
  ASSERT_TRUE(w.has_value()) << w.status().to_string();
  const Tensor raw = *src->get("0.weight");
  for (int64_t i = 0; i < raw.numel(); ++i) ASSERT_EQ(w->data<float>()[i], f16_to_f32(raw.data<f16>()[i])) << i;
  Result<Tensor> wrong = src->get("0.weight", {64, 3, 3});
  ASSERT_FALSE(wrong.has_value());
  EXPECT_THAT(wrong.status().message(), HasSubstr("taef2_encoder.pth"));
}

// ---- hand-made archives ------------------------------------------------------------------

// Raw deflate (no zlib header), as zip stores it.
std::string deflate_raw(const std::string& data) {
  z_stream z{};
  PRISM_CHECK(deflateInit2(&z, 1, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&z, uLong(data.size())), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = uInt(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = uInt(out.size());
  PRISM_CHECK(deflate(&z, Z_FINISH) == Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// A zip of stored entries, as torch.save writes them (no alignment padding: the reader must
// not need it), or deflated ones for the names in `deflated`. With zip64, every central entry
// puts its sizes and offset in a zip64 extra field and the directory is found through the
// zip64 end records, as in archives past 4 GiB or 65535 entries.
std::string make_zip(const std::vector<std::pair<std::string, std::string>>& files,
                     const std::set<std::string>& deflated = {}, bool zip64 = false) {
  auto u16 = [](std::string& s, uint32_t v) { s.push_back(char(v & 0xff)), s.push_back(char(v >> 8 & 0xff)); };
  auto u32 = [&](std::string& s, uint32_t v) { u16(s, v & 0xffff), u16(s, v >> 16); };
  auto u64 = [&](std::string& s, uint64_t v) { u32(s, uint32_t(v)), u32(s, uint32_t(v >> 32)); };
  const uint32_t kMax = 0xffffffffu;
  std::string out, dir;
  for (const auto& [name, data] : files) {
    const uint32_t crc = uint32_t(crc32(0, reinterpret_cast<const Bytef*>(data.data()), uInt(data.size())));
    const uint32_t offset = uint32_t(out.size());
    const uint32_t method = deflated.count(name) ? 8 : 0;
    const std::string stored = method ? deflate_raw(data) : data;
    u32(out, 0x04034b50), u16(out, 20), u16(out, 0), u16(out, method), u32(out, 0), u32(out, crc);
    u32(out, uint32_t(stored.size())), u32(out, uint32_t(data.size())), u16(out, uint32_t(name.size())), u16(out, 0);
    out += name + stored;
    u32(dir, 0x02014b50), u16(dir, 45), u16(dir, 45), u16(dir, 0), u16(dir, method), u32(dir, 0), u32(dir, crc);
    u32(dir, zip64 ? kMax : uint32_t(stored.size())), u32(dir, zip64 ? kMax : uint32_t(data.size()));
    u16(dir, uint32_t(name.size())), u16(dir, zip64 ? 28 : 0), u16(dir, 0), u16(dir, 0), u16(dir, 0), u32(dir, 0);
    u32(dir, zip64 ? kMax : offset);
    dir += name;
    if (zip64) u16(dir, 1), u16(dir, 24), u64(dir, data.size()), u64(dir, stored.size()), u64(dir, offset);
  }
  const uint64_t dir_offset = out.size();
  out += dir;
  if (zip64) {
    const uint64_t end64 = out.size();
    u32(out, 0x06064b50), u64(out, 44), u16(out, 45), u16(out, 45), u32(out, 0), u32(out, 0);
    u64(out, files.size()), u64(out, files.size()), u64(out, dir.size()), u64(out, dir_offset);
    u32(out, 0x07064b50), u32(out, 0), u64(out, end64), u32(out, 1);
  }
  const uint32_t count = zip64 ? 0xffff : uint32_t(files.size());
  u32(out, 0x06054b50), u16(out, 0), u16(out, 0), u16(out, count), u16(out, count);
  u32(out, zip64 ? kMax : uint32_t(dir.size())), u32(out, zip64 ? kMax : uint32_t(dir_offset)), u16(out, 0);
  return out;
}

// Pickle pieces (protocol 2, the opcodes torch.save emits).
std::string str(const std::string& s) {
  std::string o = "X";
  for (int i = 0; i < 4; ++i) o.push_back(char(s.size() >> (8 * i) & 0xff));
  return o + s;
}
std::string global(const std::string& module, const std::string& name) { return "c" + module + "\n" + name + "\n"; }
std::string int1(int v) { return std::string("K") + char(v); }
std::string tuple_of(const std::vector<int>& v) {
  std::string o = "(";
  for (int x : v) o += int1(x);
  return o + "t";
}
// _rebuild_tensor_v2(storage <key> of <numel> floats, offset, size, stride, False, {}).
std::string tensor(const std::string& key, int numel, int offset, const std::vector<int>& size,
                   const std::vector<int>& stride, const std::string& storage_type = "FloatStorage") {
  return global("torch._utils", "_rebuild_tensor_v2") + "((" + str("storage") + global("torch", storage_type) +
         str(key) + str("cpu") + int1(numel) + "tQ" + int1(offset) + tuple_of(size) + tuple_of(stride) + "\x89}tR";
}
// {"w": <tensor>} as a whole pickle.
std::string state_dict(const std::string& tensor_pickle) { return "\x80\x02}(" + str("w") + tensor_pickle + "u."; }

std::string floats(std::initializer_list<float> v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), std::data(v), s.size());
  return s;
}

Result<std::shared_ptr<const PytorchCheckpoint>> parse_zip(
    const std::vector<std::pair<std::string, std::string>>& files) {
  return PytorchCheckpoint::parse(std::make_shared<const std::string>(make_zip(files)), "hand-made");
}

Result<std::shared_ptr<const PytorchCheckpoint>> parse_pickle(const std::string& pickle,
                                                              const std::string& storage = floats({1, 2, 3, 4})) {
  return parse_zip({{"archive/data.pkl", pickle}, {"archive/data/0", storage}});
}

Status error_of(const Result<std::shared_ptr<const PytorchCheckpoint>>& r) {
  EXPECT_FALSE(r.has_value());
  return r.status();
}

TEST(PytorchCheckpoint, HandMadeArchiveReads) {
  Result<std::shared_ptr<const PytorchCheckpoint>> ok = parse_pickle(state_dict(tensor("0", 4, 0, {2, 2}, {1, 2})));
  ASSERT_TRUE(ok.has_value()) << ok.status().to_string();
  const Tensor w = *(*ok)->get("w");
  EXPECT_EQ(w.shape(), (Dims{2, 2}));
  // strides (1, 2): the transpose of [[1, 2], [3, 4]]
  EXPECT_EQ(std::vector<float>(w.data<float>(), w.data<float>() + 4), (std::vector<float>{1, 3, 2, 4}));
}

TEST(PytorchCheckpoint, RefusesHostilePicklesByName) {
  const std::string witness = test::scratch_dir("pth_hostile") + "/ran";
  const std::string cmd = str("touch " + witness);
  struct Case {
    std::string pickle, error;
  };
  const std::vector<Case> cases = {
      {"\x80\x02" + global("os", "system") + "(" + cmd + "tR.",
       "pickle global 'os.system' is not allowed in a weight file"},
      {"\x80\x02" + global("posix", "system") + "(" + cmd + "tR.", "pickle global 'posix.system' is not allowed"},
      {"\x80\x02" + global("builtins", "eval") + "(" + str("1") + "tR.",
       "pickle global 'builtins.eval' is not allowed"},
      {"\x80\x04" + str("builtins") + str("exec") + "\x93(" + cmd + "tR.",
       "pickle global 'builtins.exec' is not allowed"},
      {"\x80\x02" + global("torch", "load") + ").", "pickle global 'torch.load' is not allowed"},
      {"\x80\x02" + global("collections", "OrderedDict") + ")\x81.", "pickle opcode NEWOBJ (0x81) is not allowed"},
      {"\x80\x02(" + str("x") + "io\nos\nsystem\n.", "pickle opcode INST (0x69) is not allowed"},
      {"\x80\x02\xff.", "unknown pickle opcode 0xff"},
      {"\x80\x02" + global("torch", "FloatStorage") + "(" + int1(4) + "tR.",
       "calling 'torch.FloatStorage' is not allowed"},
      {"\x80\x02" + global("collections", "OrderedDict") + "(" + str("x") + "tR.", "OrderedDict called with arguments"},
      {"\x80\x02]}b.", "BUILD of a list with a dict state is not allowed"},
      {"\x80\x02}" + str("x") + "b.", "BUILD of a dict with a str state"},
      {"\x80\x02}" + str("x") + "R.", "REDUCE of a dict"},
      {"\x80\x06}.", "pickle protocol 6 is not supported"},
      {"\x80\x02(" + str("not storage") + "tQ.", "a persistent id that is not ('storage'"},
      {"\x80\x02h\x05.", "memo key 5 was never stored"},
      {"\x80\x02"
       "a.",
       "pop from an empty stack"},
      {"\x80\x02u.", "no MARK to pop to"},
      {"\x80\x02\x8a\x09" + std::string(9, '\1') + ".", "an integer wider than 64 bits"},
      {"\x80\x02}(" + std::string("}") + int1(1) + "u.", "a dict key of type dict"},
  };
  for (const Case& c : cases) {
    const Status s = error_of(parse_pickle(c.pickle));
    EXPECT_THAT(s.message(), HasSubstr(c.error)) << s.to_string();
    EXPECT_THAT(s.message(), HasSubstr("'hand-made'"));
  }
  EXPECT_FALSE(std::filesystem::exists(witness));  // nothing ran
}

TEST(PytorchCheckpoint, RefusesBrokenTensorsAndArchives) {
  struct Case {
    Result<std::shared_ptr<const PytorchCheckpoint>> r;
    std::string error;
  };
  const std::string ok_pickle = state_dict(tensor("0", 4, 0, {4}, {1}));
  std::string bad_crc = make_zip({{"archive/data.pkl", ok_pickle}, {"archive/data/0", floats({1, 2, 3, 4})}});
  bad_crc[bad_crc.find(ok_pickle) + 10] ^= 1;
  std::vector<Case> cases;
  cases.push_back(
      {parse_pickle(state_dict(tensor("0", 4, 1, {4}, {1}))), "reads element 4 of storage '0', which holds 4"});
  cases.push_back({parse_pickle(state_dict(tensor("0", 4, 0, {2, 2}, {2, 3}))), "reads element 5"});
  cases.push_back({parse_pickle(state_dict(tensor("0", 4, 0, {8}, {0}))), "an expanded view"});
  cases.push_back({parse_pickle(state_dict(tensor("0", 5, 0, {4}, {1}))), "needs more than its 16-byte record"});
  cases.push_back(
      {parse_pickle(state_dict(tensor("1", 4, 0, {4}, {1}))), "storage record 'archive/data/1' is missing"});
  cases.push_back({parse_pickle(state_dict(tensor("0", 4, 0, {4}, {1}, "Gibberish"))),
                   "pickle global 'torch.Gibberish' is not allowed"});
  cases.push_back({parse_pickle("\x80\x02}(" + str("a") + tensor("0", 4, 0, {4}, {1}) + str("a") +
                                tensor("0", 4, 0, {4}, {1}) + "u."),
                   "names tensor 'a' twice"});
  cases.push_back({parse_pickle(ok_pickle.substr(0, ok_pickle.size() - 1)), "ends without STOP"});
  cases.push_back({parse_pickle(ok_pickle.substr(0, 20)), "truncated"});
  cases.push_back(
      {PytorchCheckpoint::parse(std::make_shared<const std::string>(bad_crc), "hand-made"), "CRC-32 mismatch"});
  cases.push_back(
      {parse_zip(
           {{"archive/data.pkl", ok_pickle}, {"archive/data/0", floats({1, 2, 3, 4})}, {"archive/byteorder", "big"}}),
       "byte order 'big'"});
  cases.push_back({parse_zip({{"archive/other.pkl", ok_pickle}}), "without <archive>/data.pkl"});
  cases.push_back({parse_zip({{"archive/data.pkl", ok_pickle}, {"archive/data.pkl", ok_pickle}}),
                   "holds 'archive/data.pkl' twice"});
  cases.push_back(
      {PytorchCheckpoint::parse(std::make_shared<const std::string>("not a zip at all, just text......"), "hand-made"),
       "not a zip archive"});
  cases.push_back(
      {PytorchCheckpoint::parse(std::make_shared<const std::string>(""), "hand-made"), "not a zip archive"});
  for (const Case& c : cases) EXPECT_THAT(error_of(c.r).message(), HasSubstr(c.error)) << c.r.status().to_string();
}

TEST(PytorchCheckpoint, BoundsWhatASmallFileMayAllocate) {
  // 16 MiB of zeros deflate to ~16 KiB. Inflated once, fine; five transposed (copied) views of
  // it pass the budget of 64x the file + 64 MiB on the fourth.
  const std::string zeros(16 << 20, '\0');
  std::string views = "\x80\x02}(";
  for (int i = 0; i < 5; ++i)
    views += str("t" + std::to_string(i)) + global("torch._utils", "_rebuild_tensor_v2") + "((" + str("storage") +
             global("torch", "FloatStorage") + str("0") + str("cpu") + "J" + std::string("\0\0\x40\0", 4) + "tQ" +
             int1(0) + "(M" + std::string("\0\x08", 2) + "M" + std::string("\0\x08", 2) + "t(" + int1(1) + "M" +
             std::string("\0\x08", 2) + "t\x89}tR";
  views += "u.";
  Status s = error_of(
      PytorchCheckpoint::parse(std::make_shared<const std::string>(make_zip(
                                   {{"archive/data.pkl", views}, {"archive/data/0", zeros}}, {"archive/data/0"})),
                               "hand-made"));
  EXPECT_EQ(s.code(), StatusCode::resource_exhausted) << s.to_string();
  EXPECT_THAT(s.message(), HasSubstr("a copy of a strided tensor"));

  // One entry claiming far more than its stream inflates to past the budget.
  const std::string big(128 << 20, '\0');
  s = error_of(PytorchCheckpoint::parse(
      std::make_shared<const std::string>(
          make_zip({{"archive/data.pkl", state_dict(tensor("0", 4, 0, {4}, {1}))}, {"archive/data/0", big}},
                   {"archive/data/0"})),
      "hand-made"));
  EXPECT_EQ(s.code(), StatusCode::resource_exhausted) << s.to_string();
  EXPECT_THAT(s.message(), HasSubstr("inflating it"));
}

TEST(PytorchCheckpoint, ReadsZip64Archives) {
  const std::string pickle = "\x80\x02}(" + str("a") + tensor("0", 4, 0, {2}, {1}) + str("b") +
                             tensor("1", 2, 1, {1}, {1}) + "u.";
  Result<std::shared_ptr<const PytorchCheckpoint>> ok = PytorchCheckpoint::parse(
      std::make_shared<const std::string>(make_zip(
          {{"archive/data.pkl", pickle}, {"archive/data/0", floats({1, 2, 3, 4})}, {"archive/data/1", floats({5, 6})}},
          {"archive/data/1"}, /*zip64=*/true)),
      "zip64");
  ASSERT_TRUE(ok.has_value()) << ok.status().to_string();
  EXPECT_EQ((*ok)->get("a")->data<float>()[1], 2.0f);
  EXPECT_EQ((*ok)->get("b")->data<float>()[0], 6.0f);
}

TEST(PytorchCheckpoint, SharedStorageIsReadOnce) {
  // Two tensors over one storage, the second at an offset; a view with the same key must
  // reuse it.
  const std::string pickle =
      "\x80\x02}(" + str("a") + tensor("0", 4, 0, {2}, {1}) + str("b") + tensor("0", 4, 2, {2}, {1}) + "u.";
  Result<std::shared_ptr<const PytorchCheckpoint>> ok = parse_pickle(pickle);
  ASSERT_TRUE(ok.has_value()) << ok.status().to_string();
  EXPECT_EQ((*ok)->get("b")->data<float>()[1], 4.0f);
  EXPECT_EQ((*ok)->names(), (std::vector<std::string>{"a", "b"}));
}

// ---- fuzzing -------------------------------------------------------------------------------

// The entries of a zip of stored entries with no archive comment (torch.save's), read
// through its central directory (torch's local headers defer sizes to data descriptors).
std::vector<std::pair<std::string, std::string>> stored_entries(const std::string& zip) {
  auto rd = [&](size_t at, int n) {
    uint32_t v = 0;
    for (int i = n; i-- > 0;) v = v << 8 | uint8_t(zip[at + size_t(i)]);
    return v;
  };
  const size_t end = zip.size() - 22;
  PRISM_CHECK(rd(end, 4) == 0x06054b50);
  std::vector<std::pair<std::string, std::string>> out;
  size_t pos = rd(end + 16, 4);
  for (uint32_t i = 0; i < rd(end + 10, 2); ++i) {
    PRISM_CHECK(rd(pos, 4) == 0x02014b50 && rd(pos + 10, 2) == 0);  // stored
    const size_t size = rd(pos + 20, 4), name_len = rd(pos + 28, 2), local = rd(pos + 42, 4);
    const size_t data = local + 30 + rd(local + 26, 2) + rd(local + 28, 2);
    out.emplace_back(zip.substr(pos + 46, name_len), zip.substr(data, size));
    pos += 46 + name_len + rd(pos + 30, 2) + rd(pos + 32, 2);
  }
  return out;
}

int fuzz_iterations() {
  const char* env = std::getenv("PRISM_FUZZ_ITERATIONS");
  return env ? std::max(1, std::atoi(env)) : 2000;
}

// One random change of the kinds that break parsers: flipped bytes, a length or offset field
// overwritten with an edge value, a cut, bytes inserted or removed, a range copied elsewhere.
// Offsets favour [hot_begin, hot_end) (a file's pickle and directory) three times in four.
std::string mutate(std::string s, std::mt19937_64& rng, size_t hot_begin, size_t hot_end) {
  auto below = [&](size_t n) { return n == 0 ? size_t(0) : size_t(rng() % n); };
  auto where = [&] {
    if (hot_end > hot_begin && hot_end <= s.size() && rng() % 4 != 0) return hot_begin + below(hot_end - hot_begin);
    return below(s.size());
  };
  const int kind = int(rng() % 6);
  if (s.empty()) return std::string(1, char(rng()));
  switch (kind) {
    case 0:  // flip bytes
      for (int n = 1 + int(rng() % 8); n > 0; --n) s[where()] ^= char(1 + rng() % 255);
      break;
    case 1: {  // an edge value over a 1-, 2-, 4- or 8-byte field
      static const uint64_t kEdges[] = {
          0,      1,      2,          0x7f,       0x80,       0xff,         0x100,
          0x7fff, 0xffff, 0x7fffffff, 0xffffffff, 0x80000000, ~uint64_t(0), ~uint64_t(0) >> 1};
      const uint64_t v = rng() % 3 == 0 ? rng() : rng() % 2 ? s.size() - below(64) : kEdges[below(std::size(kEdges))];
      const size_t width = size_t(1) << (rng() % 4), at = where();
      for (size_t i = 0; i < width && at + i < s.size(); ++i) s[at + i] = char(v >> (8 * i));
      break;
    }
    case 2:  // cut
      s.resize(below(s.size()));
      break;
    case 3:  // insert
      s.insert(where(), std::string(1 + below(16), char(rng())));
      break;
    case 4:  // remove
      s.erase(where(), 1 + below(16));
      break;
    default: {  // copy a range over another place
      const size_t from = below(s.size()), to = where(), n = std::min({1 + below(64), s.size() - from, s.size() - to});
      s.replace(to, n, s.substr(from, n));
      break;
    }
  }
  return s;
}

struct Outcomes {
  int loaded = 0, refused = 0;
  std::map<StatusCode, int> by_code;
};

// Loads one candidate; a success must hand out readable tensors (every byte touched, so an
// out-of-range view shows under AddressSanitizer).
void try_load(const std::string& bytes, Outcomes& out) {
  Result<std::shared_ptr<const PytorchCheckpoint>> r =
      PytorchCheckpoint::parse(std::make_shared<const std::string>(bytes), "fuzz");
  if (!r) {
    ++out.refused;
    ++out.by_code[r.status().code()];
    return;
  }
  ++out.loaded;
  uint64_t sum = 0;
  for (const std::string& name : (*r)->names()) {
    Result<Tensor> t = (*r)->get(name);
    ASSERT_TRUE(t.has_value());
    ASSERT_TRUE(t->is_contiguous());
    const uint8_t* p = static_cast<const uint8_t*>(t->raw_data());
    for (size_t i = 0; i < t->nbytes(); ++i) sum += p[i];
  }
  volatile uint64_t sink = sum;
  (void)sink;
}

std::string describe(const Outcomes& o) {
  std::string s = std::to_string(o.loaded) + " loaded, " + std::to_string(o.refused) + " refused (";
  for (const auto& [code, n] : o.by_code) s += std::string(status_code_name(code)) + " " + std::to_string(n) + " ";
  return s + ")";
}

struct Seed {
  std::string name, bytes;
  int iterations;
};

std::vector<Seed> fuzz_seeds() {
  const int n = fuzz_iterations();
  std::vector<Seed> seeds;
  for (const char* f : {"small.pth", "mixed.pth", "state_dict.pth"})
    seeds.push_back({f, *read_file(generated_dir() + "/" + f), n});
  // The real file: fewer rounds (each copies 2.7 MB), mutations aimed at its pickle and directory.
  seeds.push_back({"taef2_encoder.pth", *read_file(taesd_dir() + "/taef2_encoder.pth"), std::max(1, n / 10)});
  return seeds;
}

TEST(PytorchCheckpointFuzz, MutatedArchivesLoadOrFailCleanly) {
  std::mt19937_64 rng(20261202);
  std::vector<Seed> seeds = fuzz_seeds();
  seeds.push_back({"deflated.pth", *read_file(generated_dir() + "/deflated.pth"), fuzz_iterations()});  // zlib's side
  seeds.push_back({"small.pth as zip64", make_zip(stored_entries(seeds[0].bytes), {}, /*zip64=*/true), fuzz_iterations()});
  for (const Seed& seed : seeds) {
    ASSERT_TRUE(PytorchCheckpoint::parse(std::make_shared<const std::string>(seed.bytes), seed.name).has_value());
    // Hot: the pickle (first entry, at the front) and the directory (at the back).
    const size_t hot = std::min<size_t>(seed.bytes.size(), 12000);
    Outcomes out;
    for (int i = 0; i < seed.iterations; ++i) {
      const bool tail = rng() % 2;
      std::string m = mutate(seed.bytes, rng, tail ? seed.bytes.size() - hot : 0, tail ? seed.bytes.size() : hot);
      if (rng() % 3 == 0) m = mutate(m, rng, 0, m.size());  // sometimes two changes
      try_load(m, out);
    }
    std::printf("  %s, whole archive: %s\n", seed.name.c_str(), describe(out).c_str());
    EXPECT_GT(out.refused, 0);
  }
}

TEST(PytorchCheckpointFuzz, MutatedPicklesLoadOrFailCleanly) {
  std::mt19937_64 rng(7);
  for (const Seed& seed : fuzz_seeds()) {
    std::vector<std::pair<std::string, std::string>> entries = stored_entries(seed.bytes);
    auto pkl = std::find_if(entries.begin(), entries.end(), [](const auto& e) {
      return e.first.size() > 9 && e.first.compare(e.first.size() - 9, 9, "/data.pkl") == 0;
    });
    ASSERT_NE(pkl, entries.end()) << seed.name;
    const std::string original = pkl->second;
    Outcomes out;
    for (int i = 0; i < seed.iterations; ++i) {
      pkl->second = mutate(original, rng, 0, original.size());
      if (rng() % 3 == 0) pkl->second = mutate(pkl->second, rng, 0, pkl->second.size());
      try_load(make_zip(entries), out);
    }
    std::printf("  %s, pickle only: %s\n", seed.name.c_str(), describe(out).c_str());
    EXPECT_GT(out.loaded, 0);  // some mutations leave a valid pickle (a changed number, a name)
    EXPECT_GT(out.refused, 0);
  }
}

}  // namespace
}  // namespace prism::formats
