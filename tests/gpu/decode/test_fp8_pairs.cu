// The tensor-core decode kernel's e4m3 pair -> f16x2 conversions on the GPU, for all 65536 byte
// pairs: the sm89+ cvt instruction and the bit move that sm80 runs agree bit for bit (but on the
// NaN codes), and both give core::e4m3_to_float's value; the four-value form the kernel calls
// gives the pair form's registers.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/numeric.hpp"
#include "cuda/decode/fp8_codec.cuh"

namespace flashkit::cuda::decode {
namespace {

constexpr int kPairs = 1 << 16;

__global__ void convert_pairs(std::uint32_t* by_cvt, std::uint32_t* by_bits) {
  const std::uint32_t w = blockIdx.x * blockDim.x + threadIdx.x;
  if (w >= std::uint32_t(kPairs)) return;
  // Garbage above the pair must be ignored.
  by_cvt[w] = e4m3x2_to_f16x2(w | 0xabcd0000u);
  by_bits[w] = e4m3x2_to_f16x2_by_bits(w | 0xabcd0000u);
}

float half_bits_to_float(std::uint16_t bits) {
  __half_raw raw;
  raw.x = bits;
  return __half2float(__half(raw));
}

TEST(Fp8Pairs, CvtAndBitMoveMatchTheHostDecoder) {
  std::uint32_t *d_cvt = nullptr, *d_bits = nullptr;
  ASSERT_EQ(cudaMalloc(&d_cvt, kPairs * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_bits, kPairs * 4), cudaSuccess);
  ASSERT_EQ(cudaMemset(d_cvt, 0xff, kPairs * 4), cudaSuccess);  // NaN: unwritten shows
  ASSERT_EQ(cudaMemset(d_bits, 0xff, kPairs * 4), cudaSuccess);
  convert_pairs<<<kPairs / 256, 256>>>(d_cvt, d_bits);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<std::uint32_t> cvt(kPairs), bits(kPairs);
  ASSERT_EQ(cudaMemcpy(cvt.data(), d_cvt, kPairs * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(bits.data(), d_bits, kPairs * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d_cvt);
  cudaFree(d_bits);
  int checked = 0;
  for (std::uint32_t w = 0; w < std::uint32_t(kPairs); ++w) {
    for (int half = 0; half < 2; ++half) {
      const std::uint8_t code = std::uint8_t(w >> (8 * half));
      if ((code & 0x7f) == 0x7f) continue;  // NaN codes
      const std::uint16_t c = std::uint16_t(cvt[w] >> (16 * half));
      const std::uint16_t b = std::uint16_t(bits[w] >> (16 * half));
      const float want = core::e4m3_to_float(code);
      ASSERT_EQ(c, b) << "pair " << w << " half " << half;
      ASSERT_EQ(half_bits_to_float(c), want) << "pair " << w << " half " << half;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 2 * 254 * 256);
}

// The four-value form against the pair form on each half: every pair in both halves of a word.
__global__ void convert_words(std::uint32_t* lo, std::uint32_t* hi, std::uint32_t* want_lo,
                              std::uint32_t* want_hi) {
  const std::uint32_t w = blockIdx.x * blockDim.x + threadIdx.x;
  if (w >= std::uint32_t(kPairs)) return;
  const std::uint32_t word = w | ((w ^ 0x5a3cu) << 16);
  e4m3x4_to_f16x2(word, lo[w], hi[w]);
  want_lo[w] = e4m3x2_to_f16x2(word);
  want_hi[w] = e4m3x2_to_f16x2(word >> 16);
}

TEST(Fp8Pairs, FourValuesConvertAsTwoPairs) {
  std::uint32_t* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 4 * kPairs * 4), cudaSuccess);
  ASSERT_EQ(cudaMemset(d, 0xff, 4 * kPairs * 4), cudaSuccess);  // NaN: unwritten shows
  convert_words<<<kPairs / 256, 256>>>(d, d + kPairs, d + 2 * kPairs, d + 3 * kPairs);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<std::uint32_t> all(4 * kPairs);
  ASSERT_EQ(cudaMemcpy(all.data(), d, 4 * kPairs * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d);
  for (int w = 0; w < kPairs; ++w) {
    ASSERT_EQ(all[w], all[2 * kPairs + w]) << "word " << w << " bytes 0, 1";
    ASSERT_EQ(all[kPairs + w], all[3 * kPairs + w]) << "word " << w << " bytes 2, 3";
  }
}

}  // namespace
}  // namespace flashkit::cuda::decode
