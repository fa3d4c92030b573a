// Helpers shared by the elementwise/norm/rope/conv/embedding op tests: seeded random inputs,
// reading raw reference files written by tests/reference/op_reference.py, and an all-close
// check against double-precision expectations that names the first bad elements.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/ops.h"
#include "runtime/tensor.h"

namespace prism::test {

// Uniform in [lo, hi), contiguous f32, reproducible from seed.
Tensor random_f32(const Dims& shape, uint32_t seed, float lo = -3.0f, float hi = 3.0f);

// The activation in double precision, from its published formula (QuickGELU: x sigmoid(1.702 x)).
double activation_reference(double v, ops::Activation act);

// The values of an f32 tensor (any strides) in row-major order, as doubles.
std::vector<double> to_doubles(const Tensor& t);

// A raw little-endian file of shape.numel() elements of dtype (as numpy's tofile writes).
Tensor read_bin(const std::string& path, const Dims& shape, DType dtype);

// Every |actual[i] - expected[i]| <= atol + rtol * |expected[i]|; NaNs must match NaNs.
::testing::AssertionResult all_close(const Tensor& actual, const std::vector<double>& expected,
                                     double rtol, double atol);

}  // namespace prism::test
