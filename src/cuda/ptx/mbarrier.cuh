// mbarrier (sm90): a 64-bit shared-memory barrier with a phase bit. A phase completes when the
// expected number of arrivals has arrived AND every byte announced with expect_tx has landed (TMA
// copies count their bytes down on it), so one object tells a consumer "this stage is full" and a
// producer "this stage is free" without a block-wide barrier.
//
// Waiting is by parity: a waiter keeps the phase bit it expects to complete (0 first, then 1, 0,
// ...) and try_wait(parity) is true once that phase has completed.
#pragma once

#include <cstdint>

#include "cuda/ptx/cp_async.cuh"  // smem_address

namespace flashkit::cuda::ptx {

// One thread initialises; `arrivals` arrive() calls complete each phase.
__device__ __forceinline__ void mbarrier_init(std::uint64_t* bar, std::uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_address(bar)), "r"(arrivals)
               : "memory");
}

// Makes initialised barriers visible to the async proxy (TMA) and to the other threads; follow it
// with a block barrier before anyone waits.
__device__ __forceinline__ void mbarrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

__device__ __forceinline__ void mbarrier_arrive(std::uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_address(bar)) : "memory");
}

// Arrives and announces `bytes` more bytes of asynchronous copies for the current phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(std::uint64_t* bar, std::uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_address(bar)),
               "r"(bytes)
               : "memory");
}

// Arrives once every cp.async this thread issued before it has landed (cp.async's own completion
// mechanism, sm80+). .noinc: the arrival is one of the `arrivals` the barrier was initialised
// with, so a stage filled by N threads' cp.async is a barrier of N arrivals.
__device__ __forceinline__ void cp_async_mbarrier_arrive(std::uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_address(bar))
               : "memory");
}

// True once the phase with this parity has completed. Gives up after a hardware time limit and
// returns false, so callers loop (mbarrier_wait).
__device__ __forceinline__ bool mbarrier_try_wait(std::uint64_t* bar, std::uint32_t parity) {
  std::uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(smem_address(bar)), "r"(parity)
      : "memory");
  return done != 0;
}

__device__ __forceinline__ void mbarrier_wait(std::uint64_t* bar, std::uint32_t parity) {
  while (!mbarrier_try_wait(bar, parity)) {
  }
}

}  // namespace flashkit::cuda::ptx
