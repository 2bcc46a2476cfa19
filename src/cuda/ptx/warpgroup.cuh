// Warpgroup-level control (sm90): proxy fences, register reallocation between warpgroup roles,
// and named barriers between subsets of a CTA's warps.
#pragma once

#include <cstdint>
#include <type_traits>

namespace flashkit::cuda::ptx {

// Orders this thread's ordinary shared-memory writes before later async-proxy reads of them
// (wgmma operands, TMA stores). Each writing thread runs it, then a barrier.
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// setmaxnreg (sm90a): every warp of the warpgroup must execute it, and it only takes effect when
// the kernel has a register cap at entry (__launch_bounds__(threads, 1)). A producer warpgroup
// that only issues TMA copies gives registers back (dec) so the consumers doing the math can take
// them (inc). Counts are per thread, multiples of 8 in 24..256.
template <int kRegs>
__device__ __forceinline__ void warpgroup_reg_dealloc() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg count");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

template <int kRegs>
__device__ __forceinline__ void warpgroup_reg_alloc() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg count");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// Named barriers: each kernel lists its barriers in an enum class whose values start at 1
// (barrier 0 is __syncthreads'), so ids are named at every use and never collide. `threads` is
// the number of threads that meet there (a multiple of 32): arrive() signals without waiting
// (a producer), sync() waits until all have arrived or synced.
template <typename Id>
__device__ __forceinline__ void named_barrier_sync(Id id, int threads) {
  static_assert(std::is_enum_v<Id>, "name barriers with an enum class");
  asm volatile("bar.sync %0, %1;\n" ::"r"(static_cast<int>(id)), "r"(threads) : "memory");
}

template <typename Id>
__device__ __forceinline__ void named_barrier_arrive(Id id, int threads) {
  static_assert(std::is_enum_v<Id>, "name barriers with an enum class");
  asm volatile("bar.arrive %0, %1;\n" ::"r"(static_cast<int>(id)), "r"(threads) : "memory");
}

}  // namespace flashkit::cuda::ptx
