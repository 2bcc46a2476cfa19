// stmatrix (sm90+): the store twin of ldmatrix. A warp writes four 8x8 tiles of 16-bit elements
// from the register fragments that mma.sync and wgmma produce into shared memory, one 16-byte
// row per lane address: a quarter of the 4-byte stores the same fragments take one pair at a time.
//
// Lanes 8i..8i+7 give the addresses of the 8 rows (16 bytes each) of tile i. Lane L gives, in
// register i, elements (L / 4, 2 (L % 4)) (low half) and (L / 4, 2 (L % 4) + 1) of tile i.
#pragma once

#include <cstdint>

namespace flashkit::cuda::ptx {

__device__ __forceinline__ void stmatrix_x4(std::uint32_t smem_addr, const std::uint32_t (&r)[4]) {
  asm volatile(
      "stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_addr),
      "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
      : "memory");
}

}  // namespace flashkit::cuda::ptx
