// cp.async (sm80+): global -> shared copies that bypass the registers and complete in the
// background, so a CTA can compute on one tile while the next one is in flight.
#pragma once

#include <cstdint>

namespace flashkit::cuda::ptx {

// The 32-bit shared-state-space address of a generic pointer into shared memory (what every
// shared-memory PTX instruction below takes).
__device__ __forceinline__ std::uint32_t smem_address(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// Copies 16 bytes from global `src` to shared `dst`, caching in L2 only (.cg: tiles are read once
// per CTA, L1 would only evict). With `valid` false nothing is read and the 16 bytes are zeroed,
// which is how tiles past the end of a sequence become zeros instead of garbage.
__device__ __forceinline__ void cp_async_16(std::uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes)
               : "memory");
}

// An L2 cache policy under which the lines a copy brings in are the first to be evicted: for
// bytes a CTA reads once and no one reads again soon (a decode step's private K/V pages), so
// that they do not push out lines that will be (a shared prefix read by several CTAs, partial
// states awaiting their merge). Not volatile: one createpolicy a kernel, wherever it is used.
__device__ __forceinline__ std::uint64_t l2_evict_first_policy() {
  std::uint64_t policy;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}

// cp_async_16 under an L2 cache policy (l2_evict_first_policy).
__device__ __forceinline__ void cp_async_16(std::uint32_t dst, const void* src, bool valid,
                                            std::uint64_t l2_policy) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(dst),
               "l"(src), "r"(src_bytes), "l"(l2_policy)
               : "memory");
}

// The same copy when the source is known to exist: no source-size operand to compute.
__device__ __forceinline__ void cp_async_16(std::uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}

// Closes the group of copies issued since the last commit.
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most `kPending` committed groups are still in flight (0: all landed). The
// copies become visible to other threads only after a barrier that follows this wait.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

}  // namespace flashkit::cuda::ptx
