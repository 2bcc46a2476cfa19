// mbarrier (ptx/mbarrier.cuh): phases complete only after every expected arrival, parities
// alternate, try_wait reports an incomplete phase as false instead of blocking forever, and a
// cp.async arrival completes a phase only once the thread's copies have landed.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cuda/ptx/cp_async.cuh"
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

// A two-barrier pipeline over one shared tile, as the sm90 forward's paged producer runs it:
// each round the copier threads wait until the tile is free, cp.async their chunks of the
// round's source into it and arrive through cp.async on `full`; the reader warp waits for
// `full`, copies the tile out and arrives on `empty`. Every chunk is read from another thread's
// copy, so a reader that got ahead of a copy would see the previous round's value.
constexpr int kCopiers = 128, kReaders = 32, kChunksPerCopier = 4, kRounds = 3;
constexpr int kTileChunks = kCopiers * kChunksPerCopier;

__global__ void cp_async_rounds(const uint4* src, uint4* out) {
  __shared__ uint4 tile[kTileChunks];
  __shared__ std::uint64_t full, empty;
  if (threadIdx.x == 0) {
    ptx::mbarrier_init(&full, kCopiers);
    ptx::mbarrier_init(&empty, kReaders);
    ptx::mbarrier_init_fence();
  }
  __syncthreads();
  for (int r = 0; r < kRounds; ++r) {
    if (threadIdx.x < kCopiers) {
      if (r > 0) ptx::mbarrier_wait(&empty, std::uint32_t(r - 1) & 1);
      for (int c = 0; c < kChunksPerCopier; ++c) {
        const int i = c * kCopiers + int(threadIdx.x);
        ptx::cp_async_16(ptx::smem_address(&tile[i]), &src[r * kTileChunks + i]);
      }
      ptx::cp_async_mbarrier_arrive(&full);
    } else {
      ptx::mbarrier_wait(&full, std::uint32_t(r) & 1);
      for (int i = int(threadIdx.x) - kCopiers; i < kTileChunks; i += kReaders) {
        out[r * kTileChunks + i] = tile[i];
      }
      ptx::mbarrier_arrive(&empty);
    }
  }
}

TEST(PtxMbarrier, CpAsyncArrivalWaitsForTheThreadsCopies) {
  std::vector<uint4> host(kRounds * kTileChunks);
  for (std::size_t i = 0; i < host.size(); ++i) {
    const auto v = std::uint32_t(i);
    host[i] = make_uint4(v, v * 2654435761u, ~v, 0x5eed0000u + v % 7);
  }
  const DeviceArray<uint4> src(host);
  // Poisoned: a chunk never written stays all ones.
  const DeviceArray<uint4> out(std::vector<uint4>(host.size(), make_uint4(~0u, ~0u, ~0u, ~0u)));
  cp_async_rounds<<<1, kCopiers + kReaders>>>(src.get(), out.get());
  FLASHKIT_CUDA_OK(cudaGetLastError());
  FLASHKIT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<uint4> got = out.to_host();
  for (std::size_t i = 0; i < host.size(); ++i) {
    ASSERT_TRUE(got[i].x == host[i].x && got[i].y == host[i].y && got[i].z == host[i].z &&
                got[i].w == host[i].w)
        << "round " << i / kTileChunks << " chunk " << i % kTileChunks;
  }
}

}  // namespace
}  // namespace flashkit::testing
