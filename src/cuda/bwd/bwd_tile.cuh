// What both backward kernels compute per 16 x 16 (query, key) tile: P recomputed from lse and
// dS = P * (dP - D) * d score / d (q.k), from tiles already in shared memory.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/mask_rules.hpp"
#include "core/problem.hpp"
#include "cuda/bwd/bwd_params.hpp"
#include "cuda/common/dtype.cuh"
#include "cuda/common/score.cuh"

namespace flashkit::cuda {

constexpr int kBwdTile = 16;  // queries and keys per tile
constexpr int kBwdThreads = kBwdTile * kBwdTile;
constexpr int kBwdPitch = kBwdTile + 1;  // P and dS rows, padded against bank conflicts

// Rows [t0, t0 + 16) of head h of a token tensor into a dense [16][dim] fp32 tile; rows at or
// past `len` become zeros.
__device__ __forceinline__ void load_rows(float* dst, const void* src, DType dtype,
                                          const core::TokenLayout& lay, std::int64_t b,
                                          std::int64_t start, std::int64_t t0, std::int64_t len,
                                          std::int64_t h, int dim) {
  for (int x = threadIdx.x; x < kBwdTile * dim; x += blockDim.x) {
    const std::int64_t t = t0 + x / dim;
    dst[x] = t < len
                 ? load_as_float(src, dtype, core::element_offset(lay, b, start, t, h) + x % dim)
                 : 0.0f;
  }
}

// The same tile back out (rows past `len` are not written).
__device__ __forceinline__ void store_rows(void* dst, DType dtype, const core::TokenLayout& lay,
                                           std::int64_t b, std::int64_t start, std::int64_t t0,
                                           std::int64_t len, std::int64_t h, int dim,
                                           const float* src) {
  for (int x = threadIdx.x; x < kBwdTile * dim; x += blockDim.x) {
    const std::int64_t t = t0 + x / dim;
    if (t < len)
      store_from_float(dst, dtype, core::element_offset(lay, b, start, t, h) + x % dim, src[x]);
  }
}

// Per-row statistics of queries [i0, i0 + 16): lse (-inf past the sequence) and D.
__device__ __forceinline__ void load_row_stats(float* lse, float* d, const BwdParams& bp,
                                               std::int64_t b, const core::SeqSpan& sp,
                                               std::int64_t i0, std::int64_t h) {
  const int r = threadIdx.x;
  if (r >= kBwdTile) return;
  const std::int64_t i = i0 + r;
  const bool valid = i < sp.len_q;
  lse[r] = valid ? bp.f.lse[core::element_offset(bp.f.lse_layout, b, sp.q_start, i, h)] : -INFINITY;
  d[r] = valid ? bp.d_rows[(b * bp.f.heads_q + h) * bp.f.seqlen_q + i] : 0.0f;
}

// Shared-memory tiles of one step. Rows past the sequences are zeros (q, dout, k, v) and have
// lse = -inf (so P = 0 there).
struct BwdTiles {
  const float* q;     // [16][d]
  const float* dout;  // [16][dv]
  const float* k;     // [16][d]
  const float* v;     // [16][dv]
  const float* lse;   // [16]
  const float* d;     // [16]: rowsum(dO * O)
  float* p;           // [16][kBwdPitch]
  float* ds;          // [16][kBwdPitch]
};

// Thread (r, c) = (tid / 16, tid % 16) computes P and dS of query i0 + r and key j0 + c.
__device__ __forceinline__ void tile_p_and_ds(const BwdParams& bp, const BwdTiles& t,
                                              const core::SeqSpan& sp, std::int64_t i0,
                                              std::int64_t j0, float slope) {
  const FwdParams& p = bp.f;
  const int r = threadIdx.x / kBwdTile, c = threadIdx.x % kBwdTile;
  const std::int64_t i = i0 + r, j = j0 + c;
  const std::int64_t diag = i + core::diagonal_shift(p.mask, sp.len_q, sp.len_k);
  float prob = 0.0f, ds = 0.0f;
  if (i < sp.len_q && t.lse[r] != -INFINITY && key_is_visible(p.mask, diag, j, sp.len_k)) {
    float dot = 0.0f, dp = 0.0f;
    for (int e = 0; e < p.head_dim; ++e) dot += t.q[r * p.head_dim + e] * t.k[c * p.head_dim + e];
    for (int e = 0; e < p.head_dim_v; ++e) {
      dp += t.dout[r * p.head_dim_v + e] * t.v[c * p.head_dim_v + e];
    }
    const Score s = score_and_grad(p, dot, slope, diag, j);
    prob = expf(s.value - t.lse[r]);
    ds = prob * (dp - t.d[r]) * s.grad;
  }
  t.p[r * kBwdPitch + c] = prob;
  t.ds[r * kBwdPitch + c] = ds;
}

}  // namespace flashkit::cuda
