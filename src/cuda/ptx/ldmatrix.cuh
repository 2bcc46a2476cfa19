// ldmatrix (sm75+): a warp loads four 8x8 tiles of 16-bit elements from shared memory straight
// into the register fragments that mma.sync consumes.
//
// Lanes 8i..8i+7 give the addresses of the 8 rows (16 bytes each) of tile i. Afterwards lane L
// holds, in register i, elements (L / 4, 2 (L % 4)) and (L / 4, 2 (L % 4) + 1) of tile i; with
// .trans it holds the transposed pair (2 (L % 4), L / 4) and (2 (L % 4) + 1, L / 4) instead.
#pragma once

#include <cstdint>

namespace flashkit::cuda::ptx {

__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], std::uint32_t smem_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], std::uint32_t smem_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr));
}

}  // namespace flashkit::cuda::ptx
