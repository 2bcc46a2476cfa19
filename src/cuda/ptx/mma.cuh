// mma.sync m16n8k16 (sm80+): one warp multiplies a 16x16 A tile by a 16x8 B tile of f16 or bf16
// and accumulates into a 16x8 f32 tile, D += A B.
//
// Fragments, with g = lane / 4 and t = lane % 4 (each register holds two 16-bit elements, the
// lower column in the low half):
//   A (row-major 16x16): a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..], a3 =
//   A[g+8][2t+8..] B (16x8, k x n):     b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g] D (16x8 f32):
//   d0, d1 = D[g][2t..2t+1], d2, d3 = D[g+8][2t..2t+1]
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace flashkit::cuda::ptx {

template <typename Elem>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const std::uint32_t (&a)[4],
                                             std::uint32_t b0, std::uint32_t b1) {
  static_assert(std::is_same_v<Elem, __half> || std::is_same_v<Elem, __nv_bfloat16>,
                "mma.sync m16n8k16 takes f16 or bf16 operands");
  if constexpr (std::is_same_v<Elem, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

}  // namespace flashkit::cuda::ptx
