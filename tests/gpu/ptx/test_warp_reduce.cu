// Quad and warp butterfly reductions (ptx/warp_reduce.cuh): every lane ends with the result.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "cuda/ptx/warp_reduce.cuh"
#include "gpu_check.hpp"

namespace flashkit::testing {
namespace {

__global__ void reduce_all(const float* in, float* out) {
  const int lane = threadIdx.x;
  const float v = in[lane];
  out[0 * 32 + lane] = cuda::ptx::quad_max(v);
  out[1 * 32 + lane] = cuda::ptx::quad_sum(v);
  out[2 * 32 + lane] = cuda::ptx::warp_max(v);
  out[3 * 32 + lane] = cuda::ptx::warp_sum(v);
}

TEST(PtxWarpReduce, QuadAndWarpMaxAndSumReachEveryLane) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  std::vector<float> in(32);
  for (auto& x : in) x = dist(rng);
  DeviceArray<float> din(in), dout(4 * 32);
  reduce_all<<<1, 32>>>(din.get(), dout.get());
  FLASHKIT_CUDA_OK(cudaGetLastError());
  FLASHKIT_CUDA_OK(cudaDeviceSynchronize());
  const auto got = dout.to_host();
  const float warp_max = *std::max_element(in.begin(), in.end());
  double warp_sum = 0;
  for (float x : in) warp_sum += x;
  for (int lane = 0; lane < 32; ++lane) {
    const int q = lane / 4 * 4;
    const float quad_max = std::max({in[q], in[q + 1], in[q + 2], in[q + 3]});
    const double quad_sum = double(in[q]) + in[q + 1] + in[q + 2] + in[q + 3];
    EXPECT_EQ(got[lane], quad_max) << lane;
    EXPECT_NEAR(got[32 + lane], quad_sum, 1e-5) << lane;
    EXPECT_EQ(got[64 + lane], warp_max) << lane;
    EXPECT_NEAR(got[96 + lane], warp_sum, 1e-4) << lane;
  }
}

}  // namespace
}  // namespace flashkit::testing
