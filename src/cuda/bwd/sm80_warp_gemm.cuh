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

// An operand's address register for one GEMM: the tile, the warp's first row (or column) m0 and
// the lane's offset in one value, so each fragment is base ^ unit_xor (the k step's unit) plus an
// immediate (the 16-row block and the strip): the XOR only touches bits 4..6, which a 128-byte
// aligned tile and the row offsets never carry into (ptx/swizzle.hpp). Without it every
// fragment added the tile and the warp's row to its XORed lane offset.
template <class Tile>
__device__ __forceinline__ std::uint32_t operand_base(std::uint32_t tile, int lane_off, int m0) {
  return tile + Tile::fixed_offset(m0, 0) + lane_off;
}
template <class Tile>
__device__ __forceinline__ std::uint32_t operand_address(std::uint32_t base, int row, int col) {
  return (base ^ Tile::unit_xor(col / 8)) + Tile::fixed_offset(row, col / 8);
}

// The shared address of the 16 x 16 fragment at rows (m or n) [mn, mn + 16), k [k0, k0 + 16) of
// an operand ([k][m] / [k][n] tiles are read transposed, so there k is the tile's row): from the
// tile and the lane's offset, or from an operand_base whose rows start at the warp's.
template <class Tile, Stored kStored>
__device__ __forceinline__ std::uint32_t frag_at(std::uint32_t tile, int lane_off, int mn, int k0) {
  return kStored == Stored::k_contiguous ? frag_address<Tile>(tile, lane_off, mn, k0)
                                         : frag_address<Tile>(tile, lane_off, k0, mn);
}
template <class Tile, Stored kStored>
__device__ __forceinline__ std::uint32_t frag_from_base(std::uint32_t base, int mn, int k0) {
  return kStored == Stored::k_contiguous ? operand_address<Tile>(base, mn, k0)
                                         : operand_address<Tile>(base, k0, mn);
}

// Four 8 x 8 matrices at `address`: an A fragment, or the B fragments of two n8 tiles.
template <Stored kStored>
__device__ __forceinline__ void load_frag(std::uint32_t (&f)[4], std::uint32_t address) {
  if constexpr (kStored == Stored::k_contiguous) {
    ptx::ldmatrix_x4(f, address);
  } else {
    ptx::ldmatrix_x4_trans(f, address);
  }
}

// c[mt][nt] (m16 x n8 tiles at rows m0 + 16 mt, columns n0 + 8 nt) += A B over k in [0, kK).
// Two ways to trade registers for instructions, chosen per kernel shape (Form: BwdTraits::Gemm):
//   kOperandBases: m0 / n0 folded into the operand's address register once, so a fragment's
//     address is the base XOR the k step's unit plus an immediate. m0 / n0 sit in the row index
//     of a [m][k] / [n][k] tile and in the column (unit) index of a [k][m] / [k][n] one, where
//     they are whole strips or XOR-free units (multiples of 16 columns within a strip are not:
//     those keep m0 in the per-fragment offset);
//   kAhead: every fragment loaded one use ahead (two register buffers, as the forward's gemm_qk),
//     so an ldmatrix runs under the previous mma pair instead of in front of its own.
template <class Elem, int kMt, int kNt, int kK, class ATile, Stored kA, class BTile, Stored kB,
          class Form>
__device__ __forceinline__ void warp_gemm(float (&c)[kMt][kNt][4], std::uint32_t a_tile, int a_lane,
                                          int m0, std::uint32_t b_tile, int b_lane, int n0) {
  static_assert(kNt % 2 == 0 && kK % 16 == 0, "B fragments come in n16 x k16 pairs");
  constexpr int kSteps = kK / 16, kPairs = kNt / 2, kBuffers = Form::kAhead ? 2 : 1;
  constexpr bool kABase = Form::kOperandBases && kA == Stored::k_contiguous;
  constexpr bool kBBase = Form::kOperandBases && kB == Stored::k_contiguous;
  const std::uint32_t a_base = kABase ? operand_base<ATile>(a_tile, a_lane, m0) : a_tile + a_lane;
  const std::uint32_t b_base = kBBase ? operand_base<BTile>(b_tile, b_lane, n0) : b_tile + b_lane;
  const int a_row = kABase ? 0 : m0, b_col = kBBase ? 0 : n0;
  auto a_at = [&](int row, int k0) {
    return Form::kOperandBases ? frag_from_base<ATile, kA>(a_base, a_row + row, k0)
                               : frag_at<ATile, kA>(a_tile, a_lane, m0 + row, k0);
  };
  auto b_at = [&](int col, int k0) {
    return Form::kOperandBases ? frag_from_base<BTile, kB>(b_base, b_col + col, k0)
                               : frag_at<BTile, kB>(b_tile, b_lane, n0 + col, k0);
  };
  std::uint32_t a[kBuffers][kMt][4], b[kBuffers][4];
  auto load_a = [&](int kk) {
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt) load_frag<kA>(a[kk % kBuffers][mt], a_at(16 * mt, 16 * kk));
  };
  // f: the f-th (k step, n pair) in k-major order.
  auto load_b = [&](int f) {
    load_frag<kB>(b[f % kBuffers], b_at(16 * (f % kPairs), 16 * (f / kPairs)));
  };
  if constexpr (Form::kAhead) {
    load_a(0);
    load_b(0);
  }
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk) {
#pragma unroll
    for (int np = 0; np < kPairs; ++np) {
      const int f = kk * kPairs + np;
      if constexpr (Form::kAhead) {
        if (f + 1 < kSteps * kPairs) {
          if (np + 1 == kPairs) load_a(kk + 1);
          load_b(f + 1);
        }
      } else {
        if (np == 0) load_a(kk);
        load_b(f);
      }
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt) {
        ptx::mma_m16n8k16<Elem>(c[mt][2 * np], a[kk % kBuffers][mt], b[f % kBuffers][0],
                                b[f % kBuffers][1]);
        ptx::mma_m16n8k16<Elem>(c[mt][2 * np + 1], a[kk % kBuffers][mt], b[f % kBuffers][2],
                                b[f % kBuffers][3]);
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
