// mma.sync operand fragments read from swizzled shared tiles with ldmatrix (fragment layouts in
// ptx/mma.cuh, lane roles in ptx/ldmatrix.cuh). Each operand keeps one per-lane offset register
// (made once by the *_lane functions); a load adds compile-time parts (ptx/swizzle.hpp).
#pragma once

#include <cstdint>

#include "cuda/ptx/ldmatrix.cuh"

namespace flashkit::cuda::sm80 {

// A fragment: rows [m0, m0 + 16), columns [k0, k0 + 16) of a row-major tile (Q).
// ldmatrix tiles 0..3 = (rows +0, cols +0), (+8, +0), (+0, +8), (+8, +8) -> a0..a3.
// The same lane roles fetch B fragments of a tile stored [k][n] (V for O = P V) with .trans:
// tiles (k +0, n +0), (+8, +0), (+0, +8), (+8, +8) -> b0, b1 of n-tile n0, b0, b1 of n0 + 8.
template <class Tile>
__device__ __forceinline__ int rows_major_lane(int lane) {
  return Tile::lane_offset((lane & 7) + ((lane >> 3) & 1) * 8) ^ ((lane >> 4) * 16);
}

// B fragments of two n8 tiles from a tile stored [n][k] (K for S = Q K^T): tiles
// (n +0, k +0), (+0, +8), (+8, +0), (+8, +8) -> b0, b1 of n-tile n0, b0, b1 of n-tile n0 + 8.
template <class Tile>
__device__ __forceinline__ int rows_minor_lane(int lane) {
  return Tile::lane_offset((lane & 7) + (lane >> 4) * 8) ^ (((lane >> 3) & 1) * 16);
}

// Rows [row0, row0 + 16), columns [col0, col0 + 16) with lane offset from the functions above.
template <class Tile>
__device__ __forceinline__ std::uint32_t frag_address(std::uint32_t tile, int lane_offset, int row0,
                                                      int col0) {
  return tile + Tile::fixed_offset(row0, col0 / 8) + (lane_offset ^ Tile::unit_xor(col0 / 8));
}

template <class Tile>
__device__ __forceinline__ void load_a(std::uint32_t (&a)[4], std::uint32_t tile, int lane_off,
                                       int m0, int k0) {
  ptx::ldmatrix_x4(a, frag_address<Tile>(tile, lane_off, m0, k0));
}

template <class Tile>
__device__ __forceinline__ void load_b_from_nk(std::uint32_t (&b)[4], std::uint32_t tile,
                                               int lane_off, int n0, int k0) {
  ptx::ldmatrix_x4(b, frag_address<Tile>(tile, lane_off, n0, k0));
}

template <class Tile>
__device__ __forceinline__ void load_b_from_kn(std::uint32_t (&b)[4], std::uint32_t tile,
                                               int lane_off, int k0, int n0) {
  ptx::ldmatrix_x4_trans(b, frag_address<Tile>(tile, lane_off, k0, n0));
}

}  // namespace flashkit::cuda::sm80
