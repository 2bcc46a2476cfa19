// wgmma.mma_async (sm90a): a warpgroup (4 consecutive warps, the first a multiple of 4) computes
// D[64 x N] (+)= A[64 x 16] B[16 x N] asynchronously, A from shared memory (SS) or registers (RS),
// B always from shared memory, D in registers (f32).
//
// Shared-memory operands are described by a 64-bit matrix descriptor (smem_desc) over one of the
// canonical layouts: rows of a "swizzle span" (128, 64 or 32 bytes) grouped 8 at a time into an
// atom of 8 x span bytes, inside which the 16-byte unit index of each row is XORed with the row's
// position (swizzled_offset below; the same pattern TMA writes, see tma.cuh).
//   K-major (A or B stored with K contiguous, trans flag 0): a row is one M/N index, K runs along
//     the span; atoms of 8 rows follow each other at `stride_bytes` (SBO); the leading offset is
//     unused when swizzled. A k16 step inside the span is a +32-byte start address (the hardware
//     swizzles the final address, so the tile must start on an atom boundary: 1024 bytes for
//     the 128-byte span).
//   MN-major (trans flag 1: V in P V, stored [keys][d]): a row is one K index, M/N runs along the
//     span; 8 K rows at span pitch form an atom, the next 8 K rows are `stride_bytes` (SBO) away
//     and the next span-wide block of M/N is `leading_bytes` (LBO) away.
//
// Accumulators (m64nN, f32): warp w of the warpgroup owns rows 16w..16w+15; with g = lane / 4 and
// t = lane % 4, registers d[4j + 0, 1] hold D[16w + g][8j + 2t + 0, 1] and d[4j + 2, 3] hold
// D[16w + g + 8][8j + 2t + 0, 1] -- mma.sync's m16n8 C fragment repeated N / 8 times.
// Register A (RS form) is mma.sync's m16n8k16 A fragment of the warp's 16 rows (ptx/mma.cuh).
//
// Order of use: wgmma_fence() before the first wgmma that reads registers written since the last
// one (accumulators or A); then the wgmmas; wgmma_commit(); wgmma_wait<n>() before touching the
// accumulators. warpgroup_fence_operands() keeps the compiler from moving accumulator reads or
// writes across those points.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/ptx/smem_desc.hpp"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "wgmma needs sm_90a: build this translation unit for CUDA architecture 90a only"
#endif

namespace flashkit::cuda::ptx {

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// Waits until at most kPending committed wgmma groups are still running.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

template <int kCount>
__device__ __forceinline__ void warpgroup_fence_operands(float (&d)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

#include "cuda/ptx/wgmma_ops.inc"

// D (+)= A B with A and B in shared memory. kTransA / kTransB: 0 K-major, 1 M/N-major.
template <typename Elem, int kN, int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_ss(float (&d)[kN / 2], std::uint64_t desc_a,
                                         std::uint64_t desc_b, bool accumulate) {
  static_assert(std::is_same_v<Elem, __half> || std::is_same_v<Elem, __nv_bfloat16>,
                "wgmma k16 takes f16 or bf16 operands");
  wgmma_ss_n<std::is_same_v<Elem, __half>, kN, kTransA, kTransB>(d, desc_a, desc_b,
                                                                 accumulate ? 1 : 0);
}

// D (+)= A B with A in registers (mma.sync's A fragment of this warp's 16 rows).
template <typename Elem, int kN, int kTransB>
__device__ __forceinline__ void wgmma_rs(float (&d)[kN / 2], const std::uint32_t (&a)[4],
                                         std::uint64_t desc_b, bool accumulate) {
  static_assert(std::is_same_v<Elem, __half> || std::is_same_v<Elem, __nv_bfloat16>,
                "wgmma k16 takes f16 or bf16 operands");
  wgmma_rs_n<std::is_same_v<Elem, __half>, kN, kTransB>(d, a, desc_b, accumulate ? 1 : 0);
}

}  // namespace flashkit::cuda::ptx
