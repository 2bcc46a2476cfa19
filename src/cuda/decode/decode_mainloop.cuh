// The decode mainloop: the CTA's warps stream its keys in steps of kStepKeys (warp w takes steps
// w, w + kWarps, ...). Every lane copies a 16-byte piece of kUnroll K rows and kUnroll V rows per
// step into its own slots of a kStages-deep shared-memory ring (cp.async), so kStages - 1 steps
// are in flight while it computes one, and every query row of the tile scores each key copied:
// the GQA group's heads (and the query tokens) share one read of K/V.
//
// The kRowLanes lanes that hold one key row form a group with its own online-softmax state per
// query row (groups never talk inside the loop; the epilogue merges them). Per step a group
// reduce-scatters its kUnroll x kRows partial dot products (group_reduce.cuh), scores and
// exponentiates each sum once, and broadcasts the probabilities for P.V.
#pragma once

#include <cstdint>
#include <limits>

#include "core/mask_rules.hpp"
#include "core/softmax_state.hpp"
#include "cuda/common/dtype.cuh"
#include "cuda/decode/decode_cta.cuh"
#include "cuda/decode/decode_params.hpp"
#include "cuda/decode/group_reduce.cuh"
#include "cuda/decode/kv_copy.cuh"
#include "cuda/ptx/convert.cuh"
#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/warp_reduce.cuh"

namespace flashkit::cuda::decode {

// What a lane keeps for the whole loop.
template <class Shape>
struct LaneState {
  static constexpr int kRows = Shape::kRowsPerCta, kElems = Shape::kLaneElems;
  using Sums = GroupSums<Shape::kDots, Shape::kRowLanes>;
  // This lane's slice (kElems elements at chunk * kElems) of each query row and of its
  // unnormalised output, and the group's softmax state per row (the same in all its lanes).
  float q[kRows][kElems];
  float o[kRows][kElems];
  core::SoftmaxState<float> softmax[kRows];
  // The query row of each score slot this lane holds after the reduce-scatter is fixed for the
  // kernel: its diagonal, ALiBi slope, and running max (equal to softmax[row].m, kept per slot
  // so that no register array is indexed by a lane-dependent row).
  std::int64_t slot_diag[Sums::kSlots];
  float slot_slope[Sums::kSlots];
  float slot_m[Sums::kSlots];
};

// Query row of score slot `slot` of lane `lane` (value n = u + kUnroll * r, group_reduce.cuh).
template <class Shape>
__device__ __forceinline__ int slot_row(int slot, int lane) {
  using Sums = GroupSums<Shape::kDots, Shape::kRowLanes>;
  return (slot * Sums::kSpread + lane % Sums::kSpread) / Shape::kUnroll;
}

template <class Shape>
__device__ __forceinline__ void load_queries(const PagedParams& p, const DecodeCta& c,
                                             LaneState<Shape>& s) {
  const int lane = int(threadIdx.x % 32), chunk = lane % Shape::kRowLanes;
#pragma unroll
  for (int r = 0; r < Shape::kRowsPerCta; ++r) {
    const QueryRow row = query_row(p, c, r);
    const std::int64_t at = core::element_offset(p.q_layout, c.b, c.q_start, row.token, row.head) +
                            chunk * Shape::kLaneElems;
#pragma unroll
    for (int e = 0; e < Shape::kLaneElems; ++e) {
      s.q[r][e] = load_as_float(p.q, p.q_dtype, at + e);
      s.o[r][e] = 0.0f;
    }
    s.softmax[r] = core::SoftmaxState<float>{};
  }
#pragma unroll
  for (int i = 0; i < LaneState<Shape>::Sums::kSlots; ++i) {
    const QueryRow row = query_row(p, c, slot_row<Shape>(i, lane));
    s.slot_diag[i] = row.diag;
    s.slot_slope[i] =
        p.alibi_slopes != nullptr
            ? p.alibi_slopes[c.b * p.alibi_batch_stride + row.head * p.alibi_head_stride]
            : 0.0f;
    s.slot_m[i] = -std::numeric_limits<float>::infinity();
  }
}

// Base-2 score of a visible pair under softcap and ALiBi, in the CPU oracle's order (softcap
// first, then the bias; core/mask_rules.hpp).
__device__ __forceinline__ float modified_score_log2(const PagedParams& p, float dot, float slope,
                                                     std::int64_t diag, std::int64_t key) {
  float x = dot * p.scale;
  if (p.mask.softcap > 0.0f) x = p.mask.softcap * tanhf(x / p.mask.softcap);
  if (p.alibi_slopes != nullptr) x += core::alibi_bias(slope, diag, key);
  return x * float(core::kLog2e);
}

template <class KvElem, class Shape>
__device__ __forceinline__ void stream_keys(const PagedParams& p, const DecodeCta& c,
                                            LaneState<Shape>& s, unsigned char* smem) {
  constexpr int kUnroll = Shape::kUnroll, kRows = Shape::kRowsPerCta;
  constexpr int kElems = Shape::kLaneElems, kStepKeys = Shape::kStepKeys;
  constexpr int kLanes = Shape::kRowLanes, kStages = Shape::kStages;
  constexpr int kStride = Shape::kWarps * kStepKeys;
  constexpr int kWarpSlots = kStages * 2 * kUnroll * 32;  // ring slots of one warp
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  using Sums = GroupSums<Shape::kDots, kLanes>;
  const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32);
  const int chunk = lane % kLanes, group = lane / kLanes, group_base = lane - chunk;

  // This lane's ring slots: piece (stage, k or v, u) at ring[((stage * 2 + kv) * kUnroll + u)
  // * 32]: consecutive lanes take consecutive 16-byte slots (conflict-free).
  uint4* ring = reinterpret_cast<uint4*>(smem) + warp * kWarpSlots + lane;
  [[maybe_unused]] float* ring_scale =  // e4m3 scales, slot for slot
      reinterpret_cast<float*>(smem + Shape::kRingPieces * 16) + warp * kWarpSlots + lane;
  const KvElem* k_rows =
      static_cast<const KvElem*>(p.k_pages) + c.kv_head * p.k_strides.head + chunk * kElems;
  const KvElem* v_rows =
      static_cast<const KvElem*>(p.v_pages) + c.kv_head * p.v_strides.head + chunk * kElems;
  const std::int32_t* table = p.block_table + c.b * p.table_batch;
  const int shift = p.page_shift, slot_mask = (1 << shift) - 1;
  // Steps start at multiples of kStepKeys, so with pages of >= kStepKeys tokens a step lies in
  // one page: one block-table read per step (read a step early) instead of one per row.
  const bool one_page = (1 << shift) >= kStepKeys;
  const bool plain_scores = p.mask.softcap == 0.0f && p.alibi_slopes == nullptr;
  const int lo = int(c.keys.lo), hi = int(c.keys.hi);
  auto page_of = [&](int key) { return __ldg(table + (key >> shift) * p.table_page); };

  // Copies this lane's pieces of the step at `base` into ring stage `stage`; rows outside
  // [lo, hi) become zeros without a read (their slots may hold NaN, or have no page).
  auto issue = [&](int base, int page, int stage) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int key = base + u * Shape::kRowsPerLoad + group;
      const bool valid = key >= lo && key < hi;
      const int pg = one_page ? page : (valid ? page_of(key) : 0);
      const int slot = key & slot_mask;
      const int k_at = (stage * 2 * kUnroll + u) * 32, v_at = k_at + kUnroll * 32;
      ptx::cp_async_16(ptx::smem_address(ring + k_at),
                       k_rows + pg * p.k_strides.page + slot * p.k_strides.slot, valid);
      ptx::cp_async_16(ptx::smem_address(ring + v_at),
                       v_rows + pg * p.v_strides.page + slot * p.v_strides.slot, valid);
      if constexpr (Shape::kFp8) {
        cp_async_4(ptx::smem_address(ring_scale + k_at),
                   p.k_scale + pg * p.k_scale_page + c.kv_head * p.k_scale_head, valid);
        cp_async_4(ptx::smem_address(ring_scale + v_at),
                   p.v_scale + pg * p.v_scale_page + c.kv_head * p.v_scale_head, valid);
      }
    }
  };

  // Prologue: the first kStages page ids read together (one latency, not kStages in a row),
  // then kStages - 1 steps issued.
  const int first = lo / kStepKeys * kStepKeys + warp * kStepKeys;
  int first_pages[kStages];
#pragma unroll
  for (int k = 0; k < kStages; ++k) {
    const int base = first + k * kStride;
    first_pages[k] = one_page && base < hi ? page_of(base) : 0;
  }
#pragma unroll
  for (int k = 0; k < kStages - 1; ++k) {
    const int base = first + k * kStride;
    if (base < hi) issue(base, first_pages[k], k);
    ptx::cp_async_commit();  // empty groups past the end keep the wait count uniform
  }
  int ahead = first + (kStages - 1) * kStride;  // the next step to issue
  int ahead_page = first_pages[kStages - 1];
  int stage = 0;
  for (int base = first; base < hi; base += kStride) {
    // Refill the stage computed last iteration with the step kStages - 1 ahead.
    if (ahead < hi) issue(ahead, ahead_page, (stage + kStages - 1) % kStages);
    ptx::cp_async_commit();
    ahead += kStride;
    if (one_page && ahead < hi) ahead_page = page_of(ahead);
    ptx::cp_async_wait<kStages - 1>();  // this step's pieces have landed

    const uint4* k_piece = ring + stage * 2 * kUnroll * 32;
    const uint4* v_piece = k_piece + kUnroll * 32;

    // Partial dot products of this lane's slice, dots[u + kUnroll * r], then their group sums.
    float dots[Shape::kDots];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float k[kElems];
      unpack_piece<KvElem>(k_piece[u * 32], k);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < kElems; ++e) dot = fmaf(s.q[r][e], k[e], dot);
        dots[u + kUnroll * r] = dot;
      }
    }
    reduce_scatter<Shape::kDots, kLanes>(dots, lane);

    // Score the slots: all of this lane's slots are of step row u = lane % kUnroll.
    const int u_mine = lane % kUnroll;
    const int key = base + u_mine * Shape::kRowsPerLoad + group;
    const bool valid = key >= lo && key < hi;
    float k_scale = 1.0f;  // e4m3 dequantisation, folded into the dot product
    if constexpr (Shape::kFp8) k_scale = ring_scale[(stage * 2 * kUnroll + u_mine) * 32];
    float score[Sums::kSlots], block_max[Sums::kSlots];
#pragma unroll
    for (int i = 0; i < Sums::kSlots; ++i) {
      const float dot = dots[i] * k_scale;
      const float x = plain_scores
                          ? dot * p.scale_log2
                          : modified_score_log2(p, dot, s.slot_slope[i], s.slot_diag[i], key);
      const bool seen =
          valid && (!c.key_mask || core::key_visible(p.mask, s.slot_diag[i], key, c.seq_len));
      score[i] = seen ? x : kNegInf;
      // The row's max over the step: its kUnroll rows sit in lanes that differ in the low bits.
      float m = score[i];
#pragma unroll
      for (int bit = 1; bit < kUnroll; bit *= 2) m = fmaxf(m, ptx::shfl_xor(m, bit));
      block_max[i] = m;
    }

    // Every lane updates every row's state from the row's block max (value n = kUnroll * r).
    float alpha[kRows];
    bool rescale = false;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int n = kUnroll * r;
      const float row_max =
          __shfl_sync(0xffffffffu, block_max[Sums::slot_of(n)], group_base + Sums::lane_of(n));
      alpha[r] = s.softmax[r].absorb_max(row_max);
      rescale = rescale || alpha[r] != 1.0f;
    }
    float prob[Sums::kSlots];
#pragma unroll
    for (int i = 0; i < Sums::kSlots; ++i) {
      // The same update absorb_max made to this slot's row; while the row has seen nothing its
      // max is -inf and 0 is subtracted instead (exp2(-inf - -inf) would be NaN).
      s.slot_m[i] = block_max[i] > s.slot_m[i] ? block_max[i] : s.slot_m[i];
      prob[i] = ptx::exp2_approx(score[i] - (s.slot_m[i] == kNegInf ? 0.0f : s.slot_m[i]));
    }
    // Once the running max settles, alpha is 1 for whole warps: skip the rescale then.
    if (__any_sync(0xffffffffu, rescale)) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
#pragma unroll
        for (int e = 0; e < kElems; ++e) s.o[r][e] *= alpha[r];
      }
    }

    // Every lane needs every probability of its group for P.V.
    float probs[Shape::kDots];
#pragma unroll
    for (int n = 0; n < Shape::kDots; ++n) {
      probs[n] = __shfl_sync(0xffffffffu, prob[Sums::slot_of(n)], group_base + Sums::lane_of(n));
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float sum = 0.0f;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) sum += probs[u + kUnroll * r];
      s.softmax[r].l = s.softmax[r].l * alpha[r] + sum;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float v[kElems];
      unpack_piece<KvElem>(v_piece[u * 32], v);
      float v_scale = 1.0f;
      if constexpr (Shape::kFp8) v_scale = ring_scale[(stage * 2 * kUnroll + kUnroll + u) * 32];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float w = probs[u + kUnroll * r] * v_scale;
#pragma unroll
        for (int e = 0; e < kElems; ++e) s.o[r][e] = fmaf(w, v[e], s.o[r][e]);
      }
    }
    stage = stage + 1 == kStages ? 0 : stage + 1;
  }
  ptx::cp_async_wait<0>();
}

}  // namespace flashkit::cuda::decode
