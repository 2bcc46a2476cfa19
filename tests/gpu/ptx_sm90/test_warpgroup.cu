// setmaxnreg and named barriers (ptx/warpgroup.cuh) in the shape the Hopper forward uses them: a
// producer warpgroup that gives registers away fills a shared buffer round after round, two
// consumer warpgroups that take registers read each round, handing the buffer back through a
// second barrier. Any ordering fault shows up as a wrong sum.
#include <gtest/gtest.h>

#include <vector>

#include "cuda/ptx/warpgroup.cuh"
#include "gpu_check.hpp"

namespace flashkit::testing {
namespace {

namespace ptx = cuda::ptx;

enum class Barrier : int { buffer_full = 1, buffer_empty = 2 };

constexpr int kRounds = 16, kThreads = 384;

__device__ __host__ inline int value_of(int round, int i) {
  return round * 1000 + i;
}

__global__ void __launch_bounds__(kThreads, 1) producer_consumers(int* out) {
  __shared__ int buffer[128];
  const int warpgroup = threadIdx.x / 128, i = threadIdx.x % 128;
  if (warpgroup == 0) {
    // 40 + 2 x 232 = 504 registers per thread triple: 64512 of the SM's 65536.
    ptx::warpgroup_reg_dealloc<40>();
    for (int r = 0; r < kRounds; ++r) {
      if (r > 0) ptx::named_barrier_sync(Barrier::buffer_empty, kThreads);
      buffer[i] = value_of(r, i);
      ptx::named_barrier_arrive(Barrier::buffer_full, kThreads);
    }
  } else {
    ptx::warpgroup_reg_alloc<232>();
    int sum = 0;
    for (int r = 0; r < kRounds; ++r) {
      ptx::named_barrier_sync(Barrier::buffer_full, kThreads);
      sum += buffer[(i + 7 * warpgroup) % 128] * warpgroup;
      if (r + 1 < kRounds) ptx::named_barrier_arrive(Barrier::buffer_empty, kThreads);
    }
    out[threadIdx.x - 128] = sum;
  }
}

TEST(PtxWarpgroup, ProducerAndConsumersHandOffThroughNamedBarriers) {
  DeviceArray<int> out(256);
  producer_consumers<<<1, kThreads>>>(out.get());
  FLASHKIT_CUDA_OK(cudaGetLastError());
  FLASHKIT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<int> got = out.to_host();
  for (int c = 0; c < 256; ++c) {
    const int warpgroup = 1 + c / 128, i = c % 128;
    int want = 0;
    for (int r = 0; r < kRounds; ++r) want += value_of(r, (i + 7 * warpgroup) % 128) * warpgroup;
    EXPECT_EQ(got[c], want) << "consumer thread " << c;
  }
}

}  // namespace
}  // namespace flashkit::testing
