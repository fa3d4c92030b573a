// Element types a Tensor can hold, and scalar conversions between the 16-bit floats and f32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace prism {

enum class DType : uint8_t { f32, bf16, f16, i8, u8, i32, i64, f8_e4m3 };

size_t dtype_size(DType dt);
std::string_view dtype_name(DType dt);  // "f32", "bf16", ...

// Storage-only 16-bit float types: arithmetic goes through f32.
struct bf16 { uint16_t bits; };
struct f16 { uint16_t bits; };
struct f8_e4m3 { uint8_t bits; };

inline float bf16_to_f32(bf16 v) {
  uint32_t u = uint32_t(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even, as PyTorch does; NaN stays NaN.
inline bf16 f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{uint16_t((u >> 16) | 0x40)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{uint16_t(u >> 16)};
}

float f16_to_f32(f16 v);
f16 f32_to_f16(float f);  // round to nearest even
float f8_e4m3_to_f32(f8_e4m3 v);

// The DType of a C++ element type, for Tensor::data<T>().
template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<bf16>() { return DType::bf16; }
template <> constexpr DType dtype_of<f16>() { return DType::f16; }
template <> constexpr DType dtype_of<int8_t>() { return DType::i8; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::u8; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<f8_e4m3>() { return DType::f8_e4m3; }

}  // namespace prism
