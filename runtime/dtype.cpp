// DType names and sizes; f16 and f8 conversions (bf16 is inline: it is on hot paths).
#include "runtime/dtype.h"

#include <cmath>

namespace prism {

size_t dtype_size(DType dt) {
  switch (dt) {
    case DType::f32: case DType::i32: return 4;
    case DType::bf16: case DType::f16: return 2;
    case DType::i8: case DType::u8: case DType::f8_e4m3: return 1;
    case DType::i64: return 8;
  }
  return 0;
}

std::string_view dtype_name(DType dt) {
  switch (dt) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i8: return "i8";
    case DType::u8: return "u8";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::f8_e4m3: return "f8_e4m3";
  }
  return "?";
}

float f16_to_f32(f16 v) {
  const uint32_t sign = uint32_t(v.bits & 0x8000u) << 16;
  const uint32_t exp = (v.bits >> 10) & 0x1fu;
  const uint32_t mant = v.bits & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: value = mant * 2^-24
      float f = std::ldexp(float(mant), -24);
      std::memcpy(&u, &f, 4);
      u |= sign;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

f16 f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return f16{uint16_t(sign | 0x7e00u)};        // NaN
  if (abs >= 0x477ff000u) return f16{uint16_t(sign | 0x7c00u)};       // overflow -> inf
  if (abs < 0x38800000u) {                                             // subnormal or zero
    float a;
    std::memcpy(&a, &abs, 4);
    const float scaled = a * 16777216.0f;  // 2^24: units of the smallest subnormal
    return f16{uint16_t(sign | uint16_t(std::nearbyint(scaled)))};
  }
  uint32_t r = abs + 0xfffu + ((abs >> 13) & 1u);  // round mantissa to 10 bits, ties to even
  return f16{uint16_t(sign | uint16_t((r - 0x38000000u) >> 13))};
}

float f8_e4m3_to_f32(f8_e4m3 v) {
  // E4M3FN: bias 7, no infinities, 0x7f/0xff are NaN.
  const int sign = (v.bits >> 7) ? -1 : 1;
  const int exp = (v.bits >> 3) & 0xf;
  const int mant = v.bits & 0x7;
  if (exp == 0xf && mant == 0x7) return std::nanf("");
  if (exp == 0) return float(sign) * std::ldexp(float(mant), -9);
  return float(sign) * std::ldexp(1.0f + float(mant) / 8.0f, exp - 7);
}

}  // namespace prism
