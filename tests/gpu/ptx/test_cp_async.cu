// cp.async 16-byte copies (ptx/cp_async.cuh): data lands after commit + wait + barrier, and an
// invalid source zero-fills without being read; the same under an L2 evict-first policy.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "cuda/ptx/cp_async.cuh"
#include "gpu_check.hpp"

namespace flashkit::testing {
namespace {

constexpr int kUnits = 256;  // 4 KB, 16-byte units

// Unit u is copied in group u % 2 (two commit groups); units with u % 7 == 3 are marked
// invalid and must arrive as zeros. Shared memory is prefilled with a pattern first.
template <bool kEvictFirst>
__global__ void copy_through_smem(const uint4* src, uint4* dst) {
  __shared__ uint4 buf[kUnits];
  const int tid = threadIdx.x;
  for (int u = tid; u < kUnits; u += blockDim.x) buf[u] = make_uint4(~0u, ~0u, ~0u, ~0u);
  __syncthreads();
  for (int group = 0; group < 2; ++group) {
    for (int u = tid; u < kUnits; u += blockDim.x) {
      if (u % 2 != group) continue;
      const std::uint32_t at = cuda::ptx::smem_address(&buf[u]);
      if constexpr (kEvictFirst) {
        cuda::ptx::cp_async_16(at, &src[u], u % 7 != 3, cuda::ptx::l2_evict_first_policy());
      } else {
        cuda::ptx::cp_async_16(at, &src[u], u % 7 != 3);
      }
    }
    cuda::ptx::cp_async_commit();
  }
  cuda::ptx::cp_async_wait<0>();
  __syncthreads();
  for (int u = tid; u < kUnits; u += blockDim.x) dst[kUnits - 1 - u] = buf[kUnits - 1 - u];
}

template <bool kEvictFirst>
void expect_copied_and_zero_filled() {
  std::mt19937 rng(kEvictFirst ? 5 : 3);
  std::vector<std::uint32_t> host(kUnits * 4);
  for (auto& x : host) x = rng() | 1u;  // never zero, so a zero can only come from the fill
  DeviceArray<std::uint32_t> src(host), dst(kUnits * 4);
  copy_through_smem<kEvictFirst>
      <<<1, 64>>>(reinterpret_cast<const uint4*>(src.get()), reinterpret_cast<uint4*>(dst.get()));
  FLASHKIT_CUDA_OK(cudaGetLastError());
  FLASHKIT_CUDA_OK(cudaDeviceSynchronize());
  const auto got = dst.to_host();
  for (int u = 0; u < kUnits; ++u) {
    for (int w = 0; w < 4; ++w) {
      const std::uint32_t want = u % 7 == 3 ? 0u : host[u * 4 + w];
      EXPECT_EQ(got[u * 4 + w], want) << "unit " << u << " word " << w;
    }
  }
}

TEST(PtxCpAsync, CopiesSixteenBytesAndZeroFillsInvalidUnits) {
  expect_copied_and_zero_filled<false>();
}

TEST(PtxCpAsync, CopiesUnderAnL2EvictFirstPolicy) {
  expect_copied_and_zero_filled<true>();
}

}  // namespace
}  // namespace flashkit::testing
