// Scalar helpers of the paged fast path, written so that GCC vectorises the loops calling them
// (as cpu/tiled_math.hpp's): e4m3 decoding without a table or libm, and a dot product whose
// reduction runs in 16 lanes.
#pragma once

#include <cstdint>

#include "core/numeric.hpp"
#include "cpu/tiled_math.hpp"

namespace flashkit::cpu::paged {

// Lanes of the dot product's partial sums: one AVX-512 register of fp32.
constexpr std::int64_t kLanes = 16;

// Internal linkage, one copy per translation unit for its own ISA (see tiled_math.hpp).
namespace {

// e4m3 bits to float, bit-exact with core::e4m3_to_float. Placing the 7 magnitude bits at bit 20
// and adding 120 to the exponent gives the value of every normal code exactly; a subnormal code
// (exponent 0, value m * 2^-9) is built as the normal 2^-6 * (1 + m/8) minus 2^-6, so no fp32
// denormal (slow on x86) is ever touched. 0x7f / 0xff are NaN.
inline float e4m3_bits_to_float(std::uint8_t b) {
  const std::uint32_t magnitude = b & 0x7fu;
  const bool subnormal = magnitude < 0x08u;
  const std::uint32_t exponent_bias = subnormal ? 121u : 120u;
  const float normal = core::bits_float((magnitude << 20) + (exponent_bias << 23));
  const float value = subnormal ? normal - 0.015625f : normal;
  const float quiet = magnitude == 0x7fu ? core::bits_float(0x7fc00000u) : value;
  return core::bits_float(core::float_bits(quiet) | (std::uint32_t(b & 0x80u) << 24));
}

// sum a[e] * b[e] over e < n, n a multiple of kLanes: kLanes independent partial sums (one vector
// FMA per step), then a tree reduction.
inline float dot(const float* __restrict__ a, const float* __restrict__ b, std::int64_t n) {
  float acc[kLanes] = {};
  for (std::int64_t e = 0; e < n; e += kLanes) {
    for (std::int64_t l = 0; l < kLanes; ++l) acc[l] = tiled::fmadd(a[e + l], b[e + l], acc[l]);
  }
  for (std::int64_t half = kLanes / 2; half > 0; half /= 2) {
    for (std::int64_t l = 0; l < half; ++l) acc[l] += acc[l + half];
  }
  return acc[0];
}

// s[j] = dot(q, k + j * ld, ld) for j < nk (ld a multiple of kLanes). Kept out of line: inlined
// into the large task body, GCC turns dot's 16 lanes into 16 scalar FMAs.
[[gnu::noinline]] inline void dot_rows(const float* __restrict__ q, const float* __restrict__ k,
                                       std::int64_t nk, std::int64_t ld, float* __restrict__ s) {
  for (std::int64_t j = 0; j < nk; ++j) s[j] = dot(q, k + j * ld, ld);
}

// acc[e] += sum_j p[j] * v[j * ld + e] for e < ld (a multiple of kLanes): 16 accumulator lanes
// stay in a register across all nk rows of v, so acc is loaded and stored once per call rather
// than once per row. Out of line for the same reason as dot_rows.
[[gnu::noinline]] inline void accumulate_rows(const float* __restrict__ p,
                                              const float* __restrict__ v, std::int64_t nk,
                                              std::int64_t ld, float* __restrict__ acc) {
  for (std::int64_t e = 0; e < ld; e += kLanes) {
    float lanes[kLanes];
    for (std::int64_t l = 0; l < kLanes; ++l) lanes[l] = acc[e + l];
    for (std::int64_t j = 0; j < nk; ++j) {
      const float pj = p[j];
      for (std::int64_t l = 0; l < kLanes; ++l) {
        lanes[l] = tiled::fmadd(pj, v[j * ld + e + l], lanes[l]);
      }
    }
    for (std::int64_t l = 0; l < kLanes; ++l) acc[e + l] = lanes[l];
  }
}

}  // namespace

}  // namespace flashkit::cpu::paged
