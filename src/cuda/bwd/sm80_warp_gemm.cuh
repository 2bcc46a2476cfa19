// One warp's share of a GEMM whose operands both sit in swizzled shared tiles, in any of the
// orientations the backward needs: C[m][n] += sum_k A[m][k] B[k][n], with A stored [m][k] or
// [k][m] and B stored [n][k] or [k][n]. The transposed orientations are ldmatrix .trans, so
// S^T = K Q^T, dV = P^T dO, dK = dS^T Q and dQ = dS K all read the tiles as they were copied.
#pragma once

#include <cstdint>

#include "cuda/ptx/ldmatrix.cuh"
#include "cuda/ptx/mma.cuh"
#include "cuda/sm80/warp_fragments.cuh"

namespace flashkit::cuda::sm80 {

// How an operand tile is stored: k_contiguous = [m or n][k] (each row runs along k), k_rows =
// [k][m or n] (each row is one k).
enum class Stored { k_contiguous, k_rows };

// The per-lane offset register of an operand (warp_fragments.cuh). An A tile stored [m][k] and a
// B tile stored [k][n] are read in row-major lane order; A stored [k][m] with .trans wants the
// same lane roles as B stored [n][k]: tiles (rows +0, cols +0), (+0, +8), (+8, +0), (+8, +8).
template <class Tile, bool kIsA, Stored kStored>
__device__ __forceinline__ int operand_lane(int lane) {
  constexpr bool kRowsMajor = kIsA == (kStored == Stored::k_contiguous);
  return kRowsMajor ? rows_major_lane<Tile>(lane) : rows_minor_lane<Tile>(lane);
}

// A fragment of rows [m0, m0 + 16), k in [k0, k0 + 16).
template <class Tile, Stored kStored>
__device__ __forceinline__ void load_a_frag(std::uint32_t (&a)[4], std::uint32_t tile, int lane_off,
                                            int m0, int k0) {
  if constexpr (kStored == Stored::k_contiguous) {
    ptx::ldmatrix_x4(a, frag_address<Tile>(tile, lane_off, m0, k0));
  } else {
    ptx::ldmatrix_x4_trans(a, frag_address<Tile>(tile, lane_off, k0, m0));
  }
}

// B fragments of n8 tiles n0 and n0 + 8, k in [k0, k0 + 16): b[0..1] and b[2..3].
template <class Tile, Stored kStored>
__device__ __forceinline__ void load_b_pair(std::uint32_t (&b)[4], std::uint32_t tile, int lane_off,
                                            int n0, int k0) {
  if constexpr (kStored == Stored::k_contiguous) {
    ptx::ldmatrix_x4(b, frag_address<Tile>(tile, lane_off, n0, k0));
  } else {
    ptx::ldmatrix_x4_trans(b, frag_address<Tile>(tile, lane_off, k0, n0));
  }
}

// c[mt][nt] (m16 x n8 tiles at rows m0 + 16 mt, columns n0 + 8 nt) += A B over k in [0, kK).
template <class Elem, int kMt, int kNt, int kK, class ATile, Stored kA, class BTile, Stored kB>
__device__ __forceinline__ void warp_gemm(float (&c)[kMt][kNt][4], std::uint32_t a_tile, int a_lane,
                                          int m0, std::uint32_t b_tile, int b_lane, int n0) {
  static_assert(kNt % 2 == 0 && kK % 16 == 0, "B fragments come in n16 x k16 pairs");
#pragma unroll
  for (int kk = 0; kk < kK / 16; ++kk) {
    std::uint32_t a[kMt][4];
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt)
      load_a_frag<ATile, kA>(a[mt], a_tile, a_lane, m0 + 16 * mt, 16 * kk);
#pragma unroll
    for (int np = 0; np < kNt / 2; ++np) {
      std::uint32_t b[4];
      load_b_pair<BTile, kB>(b, b_tile, b_lane, n0 + 16 * np, 16 * kk);
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt) {
        ptx::mma_m16n8k16<Elem>(c[mt][2 * np], a[mt], b[0], b[1]);
        ptx::mma_m16n8k16<Elem>(c[mt][2 * np + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

template <int kMt, int kNt>
__device__ __forceinline__ void zero(float (&c)[kMt][kNt][4]) {
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
      for (int idx = 0; idx < 4; ++idx) c[mt][nt][idx] = 0.0f;
}

}  // namespace flashkit::cuda::sm80
