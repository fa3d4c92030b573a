// What parity tests share: running a tests/reference/ generator once per test process, reading
// its reference.safetensors (fixed inputs and expected outputs), and measuring how far a C++
// result is from the reference. It knows no model: each tests/parity/<family>_test.cpp builds
// its model from the generated directory and compares tensor by tensor.
#pragma once

#include <memory>
#include <string>

#include "formats/safetensors.h"
#include "base/status.h"
#include "runtime/tensor.h"

#include <gtest/gtest.h>

namespace prism::test {

// Runs `<script> --out <dir> <args>` the first time a name is asked for in this process and
// returns dir, a scratch directory named after `name` and the process; later calls with the
// same name return it without running Python again (generators are deterministic, so one
// run serves every test). A failed run is remembered too, so each test reports it without
// retrying. The directories are removed at exit if every test passed.
Result<std::string> generate_reference(const std::string& script, const std::string& name,
                                       const std::string& args = "");

// The reference.safetensors beside a generated model directory.
Result<std::shared_ptr<const formats::SafetensorsFile>> open_reference(const std::string& model_dir);

// NOTE: the relative error of a result is max_i |got_i - ref_i| / max_i |ref_i|: one number
// per tensor, scaled by the tensor's largest magnitude, so a bound reads as "this many units
// of the tensor's range" and tiny reference values cannot blow it up.
struct ErrorStats {
  double max_abs_error = 0;  // max |got - ref|
  double max_abs_ref = 0;    // max |ref|
  double rel_error = 0;      // max_abs_error / max_abs_ref (max_abs_error when ref is all 0)
  int64_t worst_index = 0;   // flat index of max_abs_error
  double got_at_worst = 0, ref_at_worst = 0;
  std::string to_string() const;  // "rel 1.2e-05 (abs 3.1e-05 at 17: got 2.5, ref 2.5)"
};
// got, ref: the same shape, any float dtype, any strides.
ErrorStats compare(const Tensor& got, const Tensor& ref);

// A GoogleTest predicate: EXPECT_TRUE(rel_error_within(got, ref, 1e-4)) << "q". Both the
// pass and the failure message carry the measured error.
::testing::AssertionResult rel_error_within(const Tensor& got, const Tensor& ref, double bound);

// A generated checkpoint broken on purpose, for load-error tests: config.json with one piece
// of text replaced, and the weights rewritten into one model.safetensors less a tensor or with
// one 2-D tensor transposed.
struct CheckpointEdit {
  std::string config_from = {}, config_to = {};  // text replaced in config.json (empty: none)
  std::string drop = {};                          // a tensor left out
  std::string transpose = {};                     // a 2-D tensor written transposed
};
// Writes the edited copy of src_dir into a fresh scratch directory named `name`; returns it.
Result<std::string> write_edited_checkpoint(const std::string& name, const std::string& src_dir,
                                            const CheckpointEdit& edit);

}  // namespace prism::test
