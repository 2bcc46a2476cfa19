// Host-side conversions between the storage dtypes and float/double. Round-to-nearest-even
// everywhere, matching what CUDA's __float2half_rn / __float2bfloat16_rn produce.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "flashkit/tensor.hpp"

namespace flashkit::core {

inline std::uint32_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float bits_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float bf16_to_float(std::uint16_t h) {
  return bits_float(std::uint32_t(h) << 16);
}

inline std::uint16_t float_to_bf16(float f) {
  std::uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return std::uint16_t(u >> 16);
}

inline float f16_to_float(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t man = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: man * 2^-24
    const float mag = std::ldexp(float(man), -24);
    return bits_float(float_bits(mag) | sign);
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (man << 13));  // inf / NaN
  return bits_float(sign | ((exp + 112) << 23) | (man << 13));
}

inline std::uint16_t float_to_f16(float f) {
  const std::uint32_t u = float_bits(f);
  const std::uint16_t sign = std::uint16_t((u >> 16) & 0x8000u);
  const std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {                        // below 2^-14: subnormal or zero
    // The value in units of 2^-24, rounded to nearest even by the FPU.
    const float scaled = bits_float(abs) * 16777216.0f;
    return sign | std::uint16_t(std::nearbyint(scaled));
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits.
  std::uint32_t h = ((abs >> 13) - (112u << 10));
  const std::uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return sign | std::uint16_t(h);
}

// OCP FP8 e4m3 (bias 7, no infinities, 0x7f/0xff are NaN, max 448) and e5m2 (bias 15, IEEE-like).
inline float e4m3_to_float(std::uint8_t b) {
  const float sign = (b & 0x80u) ? -1.0f : 1.0f;
  const int exp = (b >> 3) & 0xf;
  const int man = b & 0x7;
  if (exp == 15 && man == 7) return NAN;
  if (exp == 0) return sign * std::ldexp(float(man), -9);
  return sign * std::ldexp(float(8 + man), exp - 10);
}

// float -> e4m3, round-to-nearest-even, saturating: |x| >= 448 (and +-inf) give +-448 rather
// than NaN, as the KV-cache quantisers of vLLM / FlashInfer do (an outlier must not poison the
// page). NaN stays NaN (0x7f with the sign).
inline std::uint8_t float_to_e4m3(float f) {
  const std::uint32_t u = float_bits(f);
  const std::uint8_t sign = std::uint8_t((u >> 24) & 0x80u);
  const std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7fu;
  const float a = bits_float(abs);
  if (a >= 448.0f) return sign | 0x7eu;
  if (a < 0.015625f) {  // below 2^-6: subnormal, in units of 2^-9 (rounding to 8 gives 2^-6)
    return sign | std::uint8_t(std::nearbyint(a * 512.0f));
  }
  // Normal: rebias the exponent (127 -> 7), keep 3 mantissa bits, round the 20 dropped ones.
  // A carry out of the mantissa correctly bumps the exponent; a < 448 never rounds past 0x7e.
  std::uint32_t code = (((abs >> 23) - 120u) << 3) | ((abs >> 20) & 0x7u);
  const std::uint32_t rest = abs & 0xfffffu;
  if (rest > 0x80000u || (rest == 0x80000u && (code & 1u))) ++code;
  return sign | std::uint8_t(code);
}

inline float e5m2_to_float(std::uint8_t b) {
  return f16_to_float(std::uint16_t(b) << 8);
}

// Reads element `i` of a buffer of `dtype` as double (floating dtypes only).
inline double load_as_double(const void* base, DType dtype, std::int64_t i) {
  switch (dtype) {
    case DType::f64:
      return static_cast<const double*>(base)[i];
    case DType::f32:
      return static_cast<const float*>(base)[i];
    case DType::f16:
      return f16_to_float(static_cast<const std::uint16_t*>(base)[i]);
    case DType::bf16:
      return bf16_to_float(static_cast<const std::uint16_t*>(base)[i]);
    case DType::e4m3:
      return e4m3_to_float(static_cast<const std::uint8_t*>(base)[i]);
    case DType::e5m2:
      return e5m2_to_float(static_cast<const std::uint8_t*>(base)[i]);
    case DType::i32:
      return static_cast<const std::int32_t*>(base)[i];
  }
  return 0;
}

// Writes `value` rounded to `dtype` (f64, f32, f16, bf16; i32 truncated).
inline void store_from_double(void* base, DType dtype, std::int64_t i, double value) {
  switch (dtype) {
    case DType::i32:
      static_cast<std::int32_t*>(base)[i] = std::int32_t(value);
      return;
    case DType::f64:
      static_cast<double*>(base)[i] = value;
      return;
    case DType::f32:
      static_cast<float*>(base)[i] = float(value);
      return;
    case DType::f16:
      static_cast<std::uint16_t*>(base)[i] = float_to_f16(float(value));
      return;
    case DType::bf16:
      static_cast<std::uint16_t*>(base)[i] = float_to_bf16(float(value));
      return;
    default:
      return;  // validation admits no other output dtype
  }
}

// Rounds a value to what `dtype` can hold (for references that emulate a storage precision).
inline double round_to(DType dtype, double value) {
  switch (dtype) {
    case DType::f32:
      return float(value);
    case DType::f16:
      return f16_to_float(float_to_f16(float(value)));
    case DType::bf16:
      return bf16_to_float(float_to_bf16(float(value)));
    default:
      return value;
  }
}

}  // namespace flashkit::core
