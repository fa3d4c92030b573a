// Generated references are cached per process by name: a parity test process pays for one
// Python start per generator configuration, however many of its tests read it.
#include "test_util/reference_io.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <system_error>

#include "base/file.h"
#include "test_util/paths.h"

namespace prism::test {

namespace {

// The generated directories of this process. Removed at exit when every test passed; kept
// after a failure, so the files the failing test read can be inspected. Constructed on the
// first generate_reference call, after GoogleTest's UnitTest, hence destroyed before it.
struct GeneratedDirs {
  std::map<std::string, Result<std::string>> by_name;  // name -> directory or error
  ~GeneratedDirs() {
    if (!::testing::UnitTest::GetInstance()->Passed()) return;
    for (const auto& [name, dir] : by_name) {
      std::error_code ec;  // best effort: a leftover scratch dir is harmless
      if (dir.has_value()) std::filesystem::remove_all(*dir, ec);
    }
  }
};

}  // namespace

Result<std::string> generate_reference(const std::string& script, const std::string& name,
                                       const std::string& args) {
  static std::mutex mu;
  static GeneratedDirs generated;
  std::lock_guard<std::mutex> lock(mu);
  auto& cache = generated.by_name;
  if (auto it = cache.find(name); it != cache.end()) return it->second;
  // One directory per process: ctest runs each test of a binary as its own process, maybe
  // in parallel, and they must not regenerate a directory another one is reading.
  const std::string dir = scratch_dir(name + "." + std::to_string(getpid()));
  Status s = run_reference(script, "--out " + dir + (args.empty() ? "" : " " + args));
  Result<std::string> result = s.ok() ? Result<std::string>(dir) : Result<std::string>(s);
  cache.emplace(name, result);
  return result;
}

Result<std::shared_ptr<const formats::SafetensorsFile>> open_reference(const std::string& model_dir) {
  return formats::SafetensorsFile::open(model_dir + "/reference.safetensors");
}

std::string ErrorStats::to_string() const {
  char buf[160];
  std::snprintf(buf, sizeof buf, "rel %.3g (abs %.3g at %lld: got %.6g, ref %.6g; max|ref| %.4g)",
                rel_error, max_abs_error, static_cast<long long>(worst_index), got_at_worst,
                ref_at_worst, max_abs_ref);
  return buf;
}

ErrorStats compare(const Tensor& got, const Tensor& ref) {
  PRISM_CHECK_MSG(got.shape() == ref.shape(), "compare: shapes differ");
  const Tensor g = got.contiguous().to(DType::f32);  // to() copies only when the dtype differs
  const Tensor r = ref.contiguous().to(DType::f32);
  const float* gp = g.data<float>();
  const float* rp = r.data<float>();
  ErrorStats s;
  for (int64_t i = 0; i < g.numel(); ++i) {
    const double e = std::fabs(double(gp[i]) - double(rp[i]));
    // NaN compares false: make it the worst error so it cannot pass silently.
    if (e > s.max_abs_error || std::isnan(e)) {
      s.max_abs_error = std::isnan(e) ? INFINITY : e;
      s.worst_index = i;
      s.got_at_worst = gp[i];
      s.ref_at_worst = rp[i];
    }
    s.max_abs_ref = std::max(s.max_abs_ref, std::fabs(double(rp[i])));
  }
  s.rel_error = s.max_abs_ref > 0 ? s.max_abs_error / s.max_abs_ref : s.max_abs_error;
  return s;
}

::testing::AssertionResult rel_error_within(const Tensor& got, const Tensor& ref, double bound) {
  if (!(got.shape() == ref.shape()))
    return ::testing::AssertionFailure() << "shape " << got.shape().to_string() << " != reference "
                                         << ref.shape().to_string();
  const ErrorStats s = compare(got, ref);
  if (s.rel_error <= bound) return ::testing::AssertionSuccess() << s.to_string() << " <= " << bound;
  return ::testing::AssertionFailure() << s.to_string() << " > bound " << bound;
}

Result<std::string> write_edited_checkpoint(const std::string& name, const std::string& src_dir,
                                            const CheckpointEdit& edit) {
  const std::string dir = scratch_dir(name);
  PRISM_ASSIGN_OR_RETURN(std::string config, read_file(src_dir + "/config.json"));
  if (!edit.config_from.empty()) {
    const size_t at = config.find(edit.config_from);
    if (at == std::string::npos) return not_found("'" + edit.config_from + "' not in config.json");
    config.replace(at, edit.config_from.size(), edit.config_to);
  }
  PRISM_RETURN_IF_ERROR(write_file(dir + "/config.json", config));
  PRISM_ASSIGN_OR_RETURN(const formats::WeightSource src, formats::WeightSource::open(src_dir));
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& tensor : src.names()) {
    if (tensor == edit.drop) continue;
    PRISM_ASSIGN_OR_RETURN(Tensor t, src.get(tensor));
    tensors.emplace_back(tensor, tensor == edit.transpose ? t.transpose(0, 1).contiguous() : t);
  }
  PRISM_RETURN_IF_ERROR(formats::write_safetensors(dir + "/model.safetensors", tensors));
  return dir;
}

}  // namespace prism::test
