// Register fragments of the tensor-core decode kernel (mma_shape.cuh): where the head-dim
// elements of Q and O^T sit in a lane, the f32 -> 16-bit hi + lo split, and the K and V
// fragments read from a ring tile with ldmatrix (e4m3 tiles converted to f16 on the way).
//
// m16n8k16 fragments (g = lane / 4, t = lane % 4; src/cuda/ptx/mma.cuh): A regs (g, 2t..),
// (g + 8, 2t..), (g, 2t + 8..), (g + 8, 2t + 8..); B regs (k 2t.., n g), (k 2t + 8.., n g);
// C (g, 2t..2t + 1), (g + 8, 2t..). A dot product may visit its k index in any order as long as
// both operands agree, so e4m3 tiles keep their byte order and Q follows it (q_dim).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/decode/fp8_codec.cuh"
#include "cuda/ptx/convert.cuh"
#include "cuda/ptx/ldmatrix.cuh"

namespace flashkit::cuda::decode {

// Head-dim index of element e of half h (0: A/B k 2t + e, 1: k 2t + 8 + e) of k slice s. A
// 16-bit K row chunk holds 8 elements, so halves are chunks; an e4m3 chunk holds the whole
// slice and ldmatrix gives lane t its bytes 4t..4t + 3, converted as (4t, 4t + 1), (4t + 2..).
template <class Shape>
__device__ __forceinline__ int q_dim(int s, int h, int t, int e) {
  return Shape::kFp8 ? 16 * s + 4 * t + 2 * h + e : 16 * s + 8 * h + 2 * t + e;
}

// Head-dim index of O^T row g + 8h of m tile s (v_fragments below: the e4m3 path puts even
// elements in rows g and odd ones in rows g + 8).
template <class Shape>
__device__ __forceinline__ int o_dim(int s, int h, int g) {
  return Shape::kFp8 ? 16 * s + 2 * g + h : 16 * s + 8 * h + g;
}

// The two 16-bit values of a packed register, back as floats (lower first).
template <class Elem>
__device__ __forceinline__ float2 unpack2(std::uint32_t r) {
  if constexpr (std::is_same_v<Elem, __nv_bfloat16>) {
    return {__uint_as_float(r << 16), __uint_as_float(r & 0xffff0000u)};
  } else {
    __half2_raw raw;
    raw.x = static_cast<unsigned short>(r & 0xffffu);
    raw.y = static_cast<unsigned short>(r >> 16);
    return __half22float2(__half2(raw));
  }
}

// (a, b) as hi + lo, two packed 16-bit pairs: hi + lo holds 16 (bf16) or 22 (f16) significant
// bits, so two mma.sync per product keep f32-like accuracy where one would round q or p to 8.
template <class Elem>
__device__ __forceinline__ void split_pack(float a, float b, std::uint32_t& hi, std::uint32_t& lo) {
  hi = ptx::pack2<Elem>(a, b);
  const float2 r = unpack2<Elem>(hi);
  lo = ptx::pack2<Elem>(a - r.x, b - r.y);
}

// B fragments of S = Q K^T for k slices (s, s + 1) (e4m3) or s (16-bit): b[n][h][0..1] is n tile
// n's (b0, b1) of slice s + h. `tile` is the shared address of the step's K tile.
template <class Shape>
__device__ __forceinline__ void k_fragments(std::uint32_t tile, int s, int lane,
                                            std::uint32_t (&b)[2][2][2]) {
  const int i = lane / 8, r = lane % 8;
  std::uint32_t w[4];
  if constexpr (Shape::kFp8) {
    // Tiles (keys 0-7, chunk s), (8-15, s), (0-7, s + 1), (8-15, s + 1): one chunk per slice.
    ptx::ldmatrix_x4(w, tile + Shape::swizzle((i % 2) * 8 + r, s + i / 2) * 16);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int n = 0; n < 2; ++n) e4m3x4_to_f16x2(w[2 * h + n], b[n][h][0], b[n][h][1]);
    }
  } else {
    // Tiles (keys 0-7, chunk 2s), (0-7, 2s + 1), (8-15, 2s), (8-15, 2s + 1).
    ptx::ldmatrix_x4(w, tile + Shape::swizzle((i / 2) * 8 + r, 2 * s + i % 2) * 16);
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      b[n][0][0] = w[2 * n];
      b[n][0][1] = w[2 * n + 1];
    }
  }
}

// A fragments of O^T += V^T P^T for m tiles (s, s + 1) (e4m3) or s (16-bit): a[h] is m tile
// s + h. ldmatrix.trans hands lane (g, t) keys 2t and 2t + 1 of one 16-bit column g; for e4m3
// that column is the element pair (2g, 2g + 1), which a byte permute regroups by element (even:
// row g, odd: row g + 8 of the m tile, o_dim) before the conversion.
template <class Shape>
__device__ __forceinline__ void v_fragments(std::uint32_t tile, int s, int lane,
                                            std::uint32_t (&a)[2][4]) {
  const int i = lane / 8, r = lane % 8;
  std::uint32_t w[4];
  if constexpr (Shape::kFp8) {
    // Tiles (keys 0-7, chunk s), (8-15, s), (0-7, s + 1), (8-15, s + 1).
    ptx::ldmatrix_x4_trans(w, tile + Shape::swizzle((i % 2) * 8 + r, s + i / 2) * 16);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const std::uint32_t keys_lo = __byte_perm(w[2 * h], 0, 0x3120);
      const std::uint32_t keys_hi = __byte_perm(w[2 * h + 1], 0, 0x3120);
      e4m3x4_to_f16x2(keys_lo, a[h][0], a[h][1]);
      e4m3x4_to_f16x2(keys_hi, a[h][2], a[h][3]);
    }
  } else {
    // Tiles (keys 0-7, chunk 2s), (0-7, 2s + 1), (8-15, 2s), (8-15, 2s + 1).
    ptx::ldmatrix_x4_trans(w, tile + Shape::swizzle((i / 2) * 8 + r, 2 * s + i % 2) * 16);
#pragma unroll
    for (int k = 0; k < 4; ++k) a[0][k] = w[k];
  }
}

}  // namespace flashkit::cuda::decode
