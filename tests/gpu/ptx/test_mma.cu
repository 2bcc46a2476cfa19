// mma.sync m16n8k16 (ptx/mma.cuh): one tile against a host matmul of the same rounded inputs,
// operands placed with the fragment layout the header documents.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "cuda/ptx/mma.cuh"
#include "gpu_check.hpp"

namespace flashkit::testing {
namespace {

using cuda::ptx::mma_m16n8k16;

// a: 16x16 row-major, b: 16x8 (k x n) row-major, c: 16x8; d = c + a b.
template <typename Elem>
__global__ void one_tile(const Elem* a, const Elem* b, const float* c, float* d) {
  const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
  auto pair = [](const Elem* p, int i0, int i1) {
    __align__(4) Elem two[2] = {p[i0], p[i1]};
    return *reinterpret_cast<const std::uint32_t*>(two);
  };
  const std::uint32_t af[4] = {pair(a, g * 16 + 2 * t, g * 16 + 2 * t + 1),
                               pair(a, (g + 8) * 16 + 2 * t, (g + 8) * 16 + 2 * t + 1),
                               pair(a, g * 16 + 2 * t + 8, g * 16 + 2 * t + 9),
                               pair(a, (g + 8) * 16 + 2 * t + 8, (g + 8) * 16 + 2 * t + 9)};
  const std::uint32_t b0 = pair(b, (2 * t) * 8 + g, (2 * t + 1) * 8 + g);
  const std::uint32_t b1 = pair(b, (2 * t + 8) * 8 + g, (2 * t + 9) * 8 + g);
  float acc[4] = {c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1], c[(g + 8) * 8 + 2 * t],
                  c[(g + 8) * 8 + 2 * t + 1]};
  mma_m16n8k16<Elem>(acc, af, b0, b1);
  d[g * 8 + 2 * t] = acc[0];
  d[g * 8 + 2 * t + 1] = acc[1];
  d[(g + 8) * 8 + 2 * t] = acc[2];
  d[(g + 8) * 8 + 2 * t + 1] = acc[3];
}

template <typename Elem>
void check_one_tile(float (*to_float)(Elem), Elem (*from_float)(float)) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<Elem> a(256), b(128);
  std::vector<float> c(128);
  for (auto& x : a) x = from_float(dist(rng));
  for (auto& x : b) x = from_float(dist(rng));
  for (auto& x : c) x = dist(rng);
  DeviceArray<Elem> da(a), db(b);
  DeviceArray<float> dc(c), dd(128);
  one_tile<Elem><<<1, 32>>>(da.get(), db.get(), dc.get(), dd.get());
  FLASHKIT_CUDA_OK(cudaGetLastError());
  FLASHKIT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> d = dd.to_host();
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 8; ++j) {
      double want = c[i * 8 + j];
      for (int k = 0; k < 16; ++k) want += double(to_float(a[i * 16 + k])) * to_float(b[k * 8 + j]);
      // Products of 16-bit values are exact in fp32; only the fp32 sums round.
      EXPECT_NEAR(d[i * 8 + j], want, 1e-5) << "row " << i << " col " << j;
    }
  }
}

TEST(PtxMma, F16TileMatchesHostMatmul) {
  check_one_tile<__half>([](__half x) { return __half2float(x); },
                         [](float x) { return __float2half_rn(x); });
}

TEST(PtxMma, Bf16TileMatchesHostMatmul) {
  check_one_tile<__nv_bfloat16>([](__nv_bfloat16 x) { return __bfloat162float(x); },
                                [](float x) { return __float2bfloat16_rn(x); });
}

}  // namespace
}  // namespace flashkit::testing
