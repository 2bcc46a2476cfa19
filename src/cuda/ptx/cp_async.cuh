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
