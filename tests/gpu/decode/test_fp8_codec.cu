// The e4m3 codec of the decode kernels (cuda/decode/fp8_codec.cuh) on the host, where it runs the
// same software paths as sm80: decoding every code against core::e4m3_to_float, and encoding
// against core::float_to_e4m3 (the CPU encoder) bit for bit over every code's value, the
// midpoints between codes (ties to even), their neighbours one float ulp away, saturation and a
// million random floats across the exponent range. (The sm89+ instructions are held to the same
// encoder on the GPU by test_append_kv and to the decoder by test_paged_decode.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "core/numeric.hpp"
#include "cuda/decode/fp8_codec.cuh"

namespace flashkit::testing {
namespace {

bool is_nan_code(int code) {
  return (code & 0x7f) == 0x7f;
}

TEST(Fp8Codec, DecodesEveryCode) {
  for (int base = 0; base < 256; base += 4) {
    const std::uint32_t word = std::uint32_t(base) | std::uint32_t(base + 1) << 8 |
                               std::uint32_t(base + 2) << 16 | std::uint32_t(base + 3) << 24;
    float out[4];
    cuda::decode::e4m3x4_to_float(word, out);
    for (int i = 0; i < 4; ++i) {
      if (is_nan_code(base + i)) continue;  // undefined in a cache (decodes to +-480 here)
      EXPECT_EQ(out[i], core::e4m3_to_float(std::uint8_t(base + i))) << "code " << base + i;
    }
  }
}

void expect_encodes_like_cpu(float x) {
  const std::uint8_t got = cuda::decode::float_to_e4m3(x);
  const std::uint8_t want = core::float_to_e4m3(x);
  ASSERT_EQ(int(got), int(want)) << "x = " << x;
}

TEST(Fp8Codec, EncodesLikeTheCpuEncoder) {
  std::vector<float> values;  // every finite code's value, positive and negative
  for (int code = 0; code < 256; ++code) {
    if (!is_nan_code(code)) values.push_back(core::e4m3_to_float(std::uint8_t(code)));
  }
  for (float v : values) expect_encodes_like_cpu(v);
  for (int code = 0; code < 0x7e; ++code) {  // midpoints of neighbouring positive codes
    const float a = core::e4m3_to_float(std::uint8_t(code));
    const float b = core::e4m3_to_float(std::uint8_t(code + 1));
    const float mid = (a + b) / 2;  // exact: e4m3 values have 4 significant bits
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      expect_encodes_like_cpu(x);
      expect_encodes_like_cpu(-x);
    }
  }
  for (float x : {448.0f, 463.99f, 464.0f, 480.0f, 1e6f, std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::denorm_min(), 0.0f}) {
    expect_encodes_like_cpu(x);
    expect_encodes_like_cpu(-x);
  }
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(-14, 10);
  for (int i = 0; i < 1000000; ++i) {
    const float x = std::ldexp(mantissa(rng), exponent(rng));
    expect_encodes_like_cpu(i % 2 ? x : -x);
  }
}

}  // namespace
}  // namespace flashkit::testing
