// The decode epilogue: each lane group's state becomes (o / l, lse); the groups of a warp merge
// by butterfly shuffles, the warps through shared memory in a fixed order (deterministic), all
// with core::merge_weights, the merge split-K, cascade and ring attention share. Then the CTA
// writes its rows: out and lse (one split) or its part of the split-K workspace.
#pragma once

#include <cstdint>
#include <limits>

#include "core/softmax_state.hpp"
#include "cuda/decode/decode_cta.cuh"
#include "cuda/decode/decode_mainloop.cuh"
#include "cuda/decode/output_store.cuh"
#include "cuda/ptx/warp_reduce.cuh"

namespace flashkit::cuda::decode {

// Folds the call's prior states (PagedParams::prior_*, unsplit calls only) into one query row's
// 4 elements e..e + 3 of o and its lse, after the CTA's own warps: the weights of
// core::merge_weights over all of them (m = max lse, w = exp(lse - m) / sum), in state order.
// Two passes over the states' lse (L1 serves the second) so that no array is sized by a run-time
// count.
__device__ __forceinline__ void merge_prior_states(const PagedParams& p, const DecodeCta& c,
                                                   const QueryRow& row, int e, float (&o)[4],
                                                   float& lse) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const std::int64_t r = workspace_row(p, c.b, c.q_start, row.token);
  const float* lse_at = p.prior_lse + r * p.prior_lse_row + row.head * p.prior_lse_head;
  const float* o_at = p.prior_o + r * p.prior_o_row + row.head * p.prior_o_head + e;
  float m = lse;
  for (int s = 0; s < p.prior_states; ++s) m = fmaxf(m, lse_at[s * p.prior_lse_state]);
  if (m == kNegInf) return;  // no key anywhere: o stays 0, lse -inf
  float w = expf(lse - m), sum = w;
  float acc[4];
#pragma unroll
  for (int v = 0; v < 4; ++v) acc[v] = w * o[v];
  for (int s = 0; s < p.prior_states; ++s) {
    const float ws = expf(lse_at[s * p.prior_lse_state] - m);
    const float* x = o_at + s * p.prior_o_state;
    sum += ws;
#pragma unroll
    for (int v = 0; v < 4; ++v) acc[v] += ws * x[v];
  }
  const float inv_sum = 1.0f / sum;
#pragma unroll
  for (int v = 0; v < 4; ++v) o[v] = acc[v] * inv_sum;
  lse = m + logf(sum);
}

// The CTA's last step, shared by both kernels: `smem` holds each warp's normalised rows
// (f32 [kWarps][kRows][kHeadDim]) and their lse ([kWarps][kRows]); they merge with the weights of
// core::merge_weights taken over all warps at once (m = max lse, w = exp(lse - m) / sum; fixed
// order, deterministic) and go to out / lse or to the split-K workspace. A thread takes 4
// consecutive elements of a row, computes the row's weights once for them and reads each warp's
// 4 with one 16-byte load. (Merging warp by warp per element took a merge_weights, 2 exp, a log
// and 2 divisions, per warp and element: ~5-6 us per CTA at the end of every decode kernel,
// measured with %globaltimer, as much as 4 steps of the key loop.)
// kFold: the kernel instance that folds PagedParams::prior_* in (merge_prior_states); the others
// carry none of its code, so their register allocation is the plain kernels' (a run-time branch
// here moved every decode kernel's and cost plain paged decode 3-4 %: docs/kernels/cascade.md,
// v11).
template <int kWarps, int kRows, int kHeadDim, int kThreads, bool kFold = false>
__device__ __forceinline__ void merge_warps_and_store(const PagedParams& p, const DecodeCta& c,
                                                      const unsigned char* smem) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  constexpr int kQuads = kHeadDim / 4;
  static_assert(kHeadDim % 4 == 0, "rows of whole 4-element runs");
  const auto& warp_o = *reinterpret_cast<const float(*)[kWarps][kRows][kHeadDim]>(smem);
  const auto& warp_lse = *reinterpret_cast<const float(*)[kWarps][kRows]>(smem + sizeof(warp_o));
  const bool ws_vec = p.ws_o != nullptr && std::uintptr_t(p.ws_o) % 16 == 0;
  // Thread i finishes runs i, i + kThreads, ... of the rows; rows past c.rows are padding.
  for (int i = int(threadIdx.x); i < c.rows * kQuads; i += kThreads) {
    const int r = i / kQuads, e = (i % kQuads) * 4;
    float m = kNegInf;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m = fmaxf(m, warp_lse[w][r]);
    float weight[kWarps], sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      weight[w] = m == kNegInf ? 0.0f : expf(warp_lse[w][r] - m);  // -inf: 0
      sum += weight[w];
    }
    const float inv_sum = sum > 0.0f ? 1.0f / sum : 0.0f;
    float lse = sum > 0.0f ? m + logf(sum) : kNegInf;
    float o[4] = {};
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float4 x = *reinterpret_cast<const float4*>(&warp_o[w][r][e]);
      const float wt = weight[w] * inv_sum;
      o[0] += wt * x.x, o[1] += wt * x.y, o[2] += wt * x.z, o[3] += wt * x.w;
    }
    const QueryRow row = query_row(p, c, r);
    if constexpr (kFold) merge_prior_states(p, c, row, e, o, lse);
    if (p.ws_o != nullptr) {
      const std::int64_t at =
          workspace_index(p, c.split, workspace_row(p, c.b, c.q_start, row.token), row.head);
      float* dst = p.ws_o + at * kHeadDim + e;
      if (ws_vec) {
        *reinterpret_cast<float4*>(dst) = make_float4(o[0], o[1], o[2], o[3]);
      } else {
#pragma unroll
        for (int v = 0; v < 4; ++v) dst[v] = o[v];
      }
      if (e == 0) p.ws_lse[at] = lse;
    } else {
#pragma unroll
      for (int v = 0; v < 4; ++v)
        store_output(p, c.b, c.q_start, row.token, row.head, e + v, o[v], lse);
    }
  }
}

// `smem` is the mainloop's ring, free once every warp has left the loop.
template <class Shape>
__device__ __forceinline__ void finish_cta(const PagedParams& p, const DecodeCta& c,
                                           LaneState<Shape>& s, unsigned char* smem) {
  constexpr int kRows = Shape::kRowsPerCta, kElems = Shape::kLaneElems;
  constexpr int kHeadDim = Shape::kHeadDimV, kWarps = Shape::kWarps;
  const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32);

  float lse[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    lse[r] = s.softmax[r].lse();
    const float inv_l = s.softmax[r].l > 0.0f ? 1.0f / s.softmax[r].l : 0.0f;
#pragma unroll
    for (int e = 0; e < kElems; ++e) s.o[r][e] *= inv_l;
  }
  // Lane groups: partners differ in the lane bits above the row's kRowLanes.
#pragma unroll
  for (int m = Shape::kRowLanes; m < 32; m *= 2) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const core::MergeWeights<float> w = core::merge_weights(lse[r], ptx::shfl_xor(lse[r], m));
#pragma unroll
      for (int e = 0; e < kElems; ++e) {
        s.o[r][e] = w.w_a * s.o[r][e] + w.w_b * ptx::shfl_xor(s.o[r][e], m);
      }
      lse[r] = w.lse;
    }
  }

  auto& warp_o = *reinterpret_cast<float(*)[kWarps][kRows][kHeadDim]>(smem);
  auto& warp_lse = *reinterpret_cast<float(*)[kWarps][kRows]>(smem + sizeof(warp_o));
  // Every warp must be done with its ring before the merge buffer overwrites it.
  __syncthreads();
  if (lane < Shape::kRowLanes) {  // group 0; its lane is its chunk
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int e = 0; e < kElems; ++e) warp_o[warp][r][lane * kElems + e] = s.o[r][e];
    }
  }
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) warp_lse[warp][r] = lse[r];
  }
  __syncthreads();

  merge_warps_and_store<kWarps, kRows, kHeadDim, Shape::kThreads>(p, c, smem);
}

}  // namespace flashkit::cuda::decode
