// Scalar math of the tiled CPU path written so that GCC/Clang vectorise the loops that call it:
// no libm calls, no branches the vectoriser cannot turn into blends. Each function is exact to
// fp32 rounding level (errors below are measured against double).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/numeric.hpp"

namespace flashkit::cpu::tiled {

// Internal linkage on purpose: the CPU kernels are compiled with -march=native and other code
// (tests) is not, so each translation unit must keep its own copy for its own ISA instead of
// the linker merging inline copies built for different ones.
namespace {

// a * b + c, one rounding where the ISA has FMA. With -std=c++17 GCC does not contract a * b + c
// on its own (-ffp-contract=off in ISO mode), which would halve the micro-kernel's throughput;
// without FMA hardware std::fma is a libm call, so fall back to the two-rounding form.
inline float fmadd(float a, float b, float c) {
#ifdef __FMA__
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

// 2^x, relative error 2e-7 (the degree-6 polynomial alone is 2.5e-9; the rest is fp32
// rounding). Below -125 it returns exactly 0, so masked scores (-inf) give probability 0; the
// input is clamped to 127 above, where fp32 ends.
inline float exp2_fast(float x) {
  // x = n + f with n the nearest integer: adding and removing 1.5 * 2^23 rounds to an integer
  // (valid for |x| < 2^22), without a floor() call the vectoriser might not have.
  constexpr float kRound = 12582912.0f;
  const float xc = x < -127.0f ? -127.0f : (x > 127.0f ? 127.0f : x);
  const float n = (xc + kRound) - kRound;
  const float f = xc - n;  // in [-0.5, 0.5]
  // Near-minimax fit of 2^f on [-0.5, 0.5] (Chebyshev nodes, degree 6).
  float p = 1.5461444696478693e-4f;
  p = fmadd(p, f, 1.3400428177411338e-3f);
  p = fmadd(p, f, 9.618056678525952e-3f);
  p = fmadd(p, f, 5.5503272266709675e-2f);
  p = fmadd(p, f, 2.4022650922288827e-1f);
  p = fmadd(p, f, 6.931472067028321e-1f);
  p = fmadd(p, f, 1.0f);
  // Multiply by 2^n by adding n to the exponent field; p is in [0.7, 1.42], so for n >= -125
  // the result stays a normal number.
  const auto e = static_cast<std::int32_t>(n);
  const float r = core::bits_float(core::float_bits(p) + (static_cast<std::uint32_t>(e) << 23));
  return x < -125.0f ? 0.0f : r;
}

// tanh(x), absolute error below 3e-7. Softcap multiplies it by the cap (often 30..50), so the
// small-|x| side must not lose digits: 1 - 2 / (e^2x + 1) cancels there, so |x| < 0.55 uses an
// odd polynomial (fit of tanh(x)/x in x^2, relative error 1e-9) instead.
inline float tanh_fast(float x) {
  constexpr float kSmall = 0.55f;
  constexpr float kTwoLog2e = 2.8853900817779268f;  // 2 * log2(e)
  const float ax = x < 0.0f ? -x : x;
  const float u = x * x;
  float q = -6.233633475766925e-3f;
  q = fmadd(q, u, 2.1038214797501092e-2f);
  q = fmadd(q, u, -5.384231924465599e-2f);
  q = fmadd(q, u, 1.33324565364124e-1f);
  q = fmadd(q, u, -3.3333310797748356e-1f);
  q = fmadd(q, u, 0.999999999054802f);
  const float small = x * q;
  const float e = exp2_fast(-kTwoLog2e * ax);  // e^(-2|x|), in (0, 0.34] here
  const float large = (1.0f - e) / (1.0f + e);
  const float signed_large = x < 0.0f ? -large : large;
  return ax < kSmall ? small : signed_large;
}

// fp16 bits to float, bit-exact with core::f16_to_float but branch-free (that one calls ldexp
// for subnormals, which keeps its loops scalar). (h & 0x7fff) << 13 read as a float is the fp16
// value times 2^-112 for normals and subnormals alike, so one exact multiply by 2^112 rebiases
// the exponent (15 -> 127); only inf/NaN (exponent 31) need their exponent set by hand.
inline float f16_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t magnitude = h & 0x7fffu;
  const float scaled = core::bits_float(magnitude << 13) * 0x1p112f;
  const float special = core::bits_float(0x7f800000u | (magnitude << 13));
  const float value = magnitude >= 0x7c00u ? special : scaled;
  return core::bits_float(core::float_bits(value) | sign);
}

inline float bf16_bits_to_float(std::uint16_t h) {
  return core::bits_float(static_cast<std::uint32_t>(h) << 16);
}

}  // namespace

}  // namespace flashkit::cpu::tiled
