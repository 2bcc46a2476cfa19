// What the tensor-core backward computes per (query, key) element between its GEMMs, and the
// per-row statistics it reads: P recomputed from lse and dS = P * (dP - D) * d score / d (q.k),
// both kernels sharing the score rules of the forward (cuda/common/score.cuh).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "core/mask_rules.hpp"
#include "core/softmax_state.hpp"
#include "cuda/bwd/bwd_params.hpp"
#include "cuda/common/score.cuh"
#include "cuda/ptx/convert.cuh"

namespace flashkit::cuda::sm80 {

// lse in base 2 as the kernels subtract it, and D. A row past the sequence or one that saw no
// key (lse = -inf) gets +inf, so every P of it is exp2(-inf) = 0 instead of NaN.
struct RowStats {
  float lse2, d;
};
__device__ __forceinline__ RowStats row_stats(const BwdParams& bp, int b, const core::SeqSpan& sp,
                                              std::int64_t i, int h) {
  if (i >= sp.len_q) return {INFINITY, 0.0f};
  const float lse = bp.f.lse[core::element_offset(bp.f.lse_layout, b, sp.q_start, i, h)];
  const float d = bp.d_rows[(std::int64_t(b) * bp.f.heads_q + h) * bp.f.seqlen_q + i];
  return {lse == -INFINITY ? INFINITY : lse * float(core::kLog2e), d};
}

// Where a (query, key) block sits and which rules apply to it (uniform across the CTA).
struct BwdScoreContext {
  std::int64_t row0;   // sequence index of the query block's row 0
  std::int64_t col0;   // sequence index of the key block's key 0
  std::int64_t shift;  // causal diagonal shift
  std::int64_t len_k;
  float slope;  // ALiBi slope of this (sequence, query head)
  bool mods;    // softcap or ALiBi on
  bool masked;  // the block crosses a mask edge or the end of the keys
};

// The keys [lo, hi] + [0, pre) (block-relative) that one query row (block-relative) may see.
struct RowBand {
  int lo, hi, pre;
};

// core::key_band of every row of a (query block, key block) pair at once, block-relative: row r
// sees keys [r + lo0, min(r + hi0, last)] and [0, pre). Computed once per block pair in 64 bits
// and clamped to +-2^30 (far past any block-relative index, so r + lo0 cannot overflow), which
// leaves two adds and a min per row. key_band per row cost ~50 instructions (64-bit compares and
// branches); the dK/dV kernel holds 8..16 query rows per thread, so that was ~400-800
// instructions of a masked step against ~1200 for a whole plain one.
struct BlockBand {
  int lo0, hi0, last, pre;
};
__device__ __forceinline__ BlockBand block_band(const FwdParams& p, const BwdScoreContext& c) {
  constexpr std::int64_t kFar = std::int64_t(1) << 30;
  auto clamp = [](std::int64_t x) { return int(x < -kFar ? -kFar : (x > kFar ? kFar : x)); };
  const std::int64_t diag0 = c.row0 + c.shift - c.col0;  // row 0's diagonal, block-relative
  std::int64_t lo0 = -kFar, hi0 = kFar;
  if (p.mask.window_left >= 0) lo0 = diag0 - p.mask.window_left;
  if (p.mask.causal) hi0 = diag0;
  if (p.mask.window_right >= 0 && diag0 + p.mask.window_right < hi0) {
    hi0 = diag0 + p.mask.window_right;
  }
  const std::int64_t prefix = p.mask.prefix_len < c.len_k ? p.mask.prefix_len : c.len_k;
  return {clamp(lo0), clamp(hi0), clamp(c.len_k - 1 - c.col0), clamp(prefix - c.col0)};
}
__device__ __forceinline__ RowBand row_band(const BlockBand& bb, int row) {
  const int hi = row + bb.hi0;
  return {row + bb.lo0, hi < bb.last ? hi : bb.last, bb.pre};
}
// Bitwise, not short-circuit: `||` and `&&` compiled to a branch per element here (~19
// instructions an element in a masked step, against ~6 as three compares and two selects).
__device__ __forceinline__ bool band_sees(const RowBand& band, int col) {
  return (col < band.pre) | ((col >= band.lo) & (col <= band.hi));
}

// P and dS of one element from its raw q.k and dP; `visible` false gives P = dS = 0.
__device__ __forceinline__ void prob_and_dscore(float& s_to_p, float& dp_to_ds, const FwdParams& p,
                                                const BwdScoreContext& c, RowStats st, int row,
                                                int col, bool visible) {
  float value2, grad;
  if (!c.mods) {
    value2 = s_to_p * p.scale_log2;
    grad = p.scale;
  } else {
    const Score sc = score_and_grad(p, s_to_p, c.slope, c.row0 + row + c.shift, c.col0 + col);
    value2 = sc.value * float(core::kLog2e);
    grad = sc.grad;
  }
  const float prob = visible ? ptx::exp2_approx(value2 - st.lse2) : 0.0f;
  s_to_p = prob;
  dp_to_ds = prob * (dp_to_ds - st.d) * grad;
}

// A query row's statistics as the plain path consumes them: -lse2 and -D * scale, so an element
// is P = exp2(fma(s, scale_log2, -lse2)) and dS = P * fma(dP, scale, -D * scale).
struct PlainRow {
  float neg_lse2, neg_d_scaled;
};
__device__ __forceinline__ PlainRow plain_row(const FwdParams& p, RowStats st) {
  return {-st.lse2, -st.d * p.scale};
}

// prob_and_dscore for an element no mask edge reaches and no softcap or ALiBi shapes: two FMAs,
// one ex2 and one multiply. A row past the sequence or one that saw no key has -lse2 = -inf and
// gets P = dS = 0.
__device__ __forceinline__ void plain_prob_and_dscore(float& s_to_p, float& dp_to_ds,
                                                      const FwdParams& p, PlainRow row) {
  const float prob = ptx::exp2_approx(fmaf(s_to_p, p.scale_log2, row.neg_lse2));
  s_to_p = prob;
  dp_to_ds = prob * fmaf(dp_to_ds, p.scale, row.neg_d_scaled);
}

// The plain element of a block that may cross a mask edge (kMasked): keys outside the row's band
// get P = dS = 0 by a select, not a branch.
template <bool kMasked>
__device__ __forceinline__ void plain_element(float& s_to_p, float& dp_to_ds, const FwdParams& p,
                                              PlainRow row, const RowBand& band, int col) {
  plain_prob_and_dscore(s_to_p, dp_to_ds, p, row);
  if constexpr (kMasked) {
    const bool visible = band_sees(band, col);
    s_to_p = visible ? s_to_p : 0.0f;
    dp_to_ds = visible ? dp_to_ds : 0.0f;
  }
}

// Two adjacent gradient elements (even column) in the gradient's dtype: f32, f16 or bf16.
__device__ __forceinline__ void store_pair(void* base, DType dtype, std::int64_t offset, float x0,
                                           float x1) {
  switch (dtype) {
    case DType::f16:
      *reinterpret_cast<std::uint32_t*>(static_cast<__half*>(base) + offset) =
          ptx::pack2<__half>(x0, x1);
      return;
    case DType::bf16:
      *reinterpret_cast<std::uint32_t*>(static_cast<__nv_bfloat16*>(base) + offset) =
          ptx::pack2<__nv_bfloat16>(x0, x1);
      return;
    default:
      *reinterpret_cast<float2*>(static_cast<float*>(base) + offset) = {x0, x1};
      return;
  }
}

}  // namespace flashkit::cuda::sm80
