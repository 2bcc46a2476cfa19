// mbarrier (ptx/mbarrier.cuh): phases complete only after every expected arrival, parities
// alternate, and try_wait reports an incomplete phase as false instead of blocking forever.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cuda/ptx/mbarrier.cuh"
#include "gpu_check.hpp"

namespace flashkit::testing {
namespace {

namespace ptx = cuda::ptx;

constexpr int kThreads = 128, kPhases = 4;

// Each thread counts itself in, arrives, waits for the phase, then records the count it saw: at
// least every arrival of this phase, at most those of the next one too (fast threads run ahead).
__global__ void phases(int* seen) {
  __shared__ std::uint64_t bar;
  __shared__ int arrived;
  if (threadIdx.x == 0) {
    ptx::mbarrier_init(&bar, kThreads);
    arrived = 0;
    ptx::mbarrier_init_fence();
  }
  __syncthreads();
  for (int p = 0; p < kPhases; ++p) {
    atomicAdd(&arrived, 1);
    ptx::mbarrier_arrive(&bar);
    ptx::mbarrier_wait(&bar, p & 1);
    seen[p * kThreads + threadIdx.x] = atomicAdd(&arrived, 0);
  }
}

TEST(PtxMbarrier, PhaseCompletesOnlyAfterEveryArrival) {
  DeviceArray<int> seen(kPhases * kThreads);
  phases<<<1, kThreads>>>(seen.get());
  FLASHKIT_CUDA_OK(cudaGetLastError());
  FLASHKIT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<int> s = seen.to_host();
  for (int p = 0; p < kPhases; ++p) {
    for (int t = 0; t < kThreads; ++t) {
      EXPECT_GE(s[p * kThreads + t], kThreads * (p + 1)) << "phase " << p << " thread " << t;
      EXPECT_LE(s[p * kThreads + t], kThreads * (p + 2)) << "phase " << p << " thread " << t;
    }
  }
}

// One thread, two expected arrivals: after one the phase is still open, after two it is done,
// and the next phase (parity 1) is open again.
__global__ void pending(int* result) {
  __shared__ std::uint64_t bar;
  ptx::mbarrier_init(&bar, 2);
  ptx::mbarrier_init_fence();
  ptx::mbarrier_arrive(&bar);
  result[0] = ptx::mbarrier_try_wait(&bar, 0);
  ptx::mbarrier_arrive(&bar);
  result[1] = ptx::mbarrier_try_wait(&bar, 0);
  result[2] = ptx::mbarrier_try_wait(&bar, 1);
}

TEST(PtxMbarrier, TryWaitIsFalseWhileArrivalsAreMissing) {
  DeviceArray<int> result(3);
  pending<<<1, 1>>>(result.get());
  FLASHKIT_CUDA_OK(cudaGetLastError());
  FLASHKIT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<int> r = result.to_host();
  EXPECT_EQ(r[0], 0) << "phase 0 reported complete after 1 of 2 arrivals";
  EXPECT_EQ(r[1], 1) << "phase 0 not complete after 2 of 2 arrivals";
  EXPECT_EQ(r[2], 0) << "phase 1 reported complete with no arrivals";
}

}  // namespace
}  // namespace flashkit::testing
