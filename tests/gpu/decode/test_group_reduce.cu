// reduce_scatter (cuda/decode/group_reduce.cuh) on one warp: after it, slot i of a lane holds
// the sum over its lane group of value n = i * kSpread + (lane % kSpread), for the shapes the
// decode kernels use (group of 4..32 lanes, 2..32 values per lane). Isolates the score layout
// from the rest of the kernel when test_paged_decode fails.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda/decode/group_reduce.cuh"

namespace flashkit::testing {
namespace {

using cuda::decode::GroupSums;

// Lane l's value n: distinct small integers, so f32 sums are exact.
__host__ __device__ float input(int lane, int n) {
  return float((lane * 37 + n * 11) % 64 - 20);
}

template <int kN, int kLanes>
__global__ void reduce_scatter_kernel(float* out) {
  const int lane = int(threadIdx.x);
  float v[kN];
#pragma unroll
  for (int n = 0; n < kN; ++n) v[n] = input(lane, n);
  cuda::decode::reduce_scatter<kN, kLanes>(v, lane);
#pragma unroll
  for (int i = 0; i < GroupSums<kN, kLanes>::kSlots; ++i) {
    out[lane * GroupSums<kN, kLanes>::kSlots + i] = v[i];
  }
}

template <int kN, int kLanes>
void check() {
  SCOPED_TRACE(std::to_string(kN) + " values over groups of " + std::to_string(kLanes));
  using Sums = GroupSums<kN, kLanes>;
  float* d_out = nullptr;
  ASSERT_EQ(cudaMalloc(&d_out, 32 * Sums::kSlots * sizeof(float)), cudaSuccess);
  reduce_scatter_kernel<kN, kLanes><<<1, 32>>>(d_out);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> out(32 * Sums::kSlots);
  ASSERT_EQ(cudaMemcpy(out.data(), d_out, out.size() * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  cudaFree(d_out);
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < Sums::kSlots; ++i) {
      const int n = i * Sums::kSpread + lane % Sums::kSpread;
      ASSERT_EQ(Sums::slot_of(n), i);
      ASSERT_EQ(Sums::lane_of(n), lane % Sums::kSpread);
      float want = 0;
      for (int c = 0; c < kLanes; ++c) want += input(lane / kLanes * kLanes + c, n);
      ASSERT_EQ(out[std::size_t(lane * Sums::kSlots + i)], want)
          << "lane " << lane << " slot " << i;
    }
  }
}

TEST(GroupReduce, ReduceScatterLeavesEachSumWhereGroupSumsSays) {
  check<16, 16>();  // d 128 bf16, 4 rows x 4 steps
  check<4, 16>();   // 1 row: fewer values than lanes
  check<16, 8>();   // d 128 e4m3 / d 64 bf16: more values than lanes
  check<8, 32>();   // d 256 bf16
  check<16, 32>();
  check<8, 4>();  // d 64 e4m3
  check<32, 16>();
  check<2, 4>();
}

}  // namespace
}  // namespace flashkit::testing
