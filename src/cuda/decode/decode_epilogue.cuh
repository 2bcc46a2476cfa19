// The decode epilogue: each lane group's state becomes (o / l, lse); the groups of a warp merge
// by butterfly shuffles, the warps through shared memory in a fixed order (deterministic), all
// with core::merge_weights, the merge split-K, cascade and ring attention share. Then the CTA
// writes its rows: out and lse (one split) or its part of the split-K workspace.
#pragma once

#include <limits>

#include "core/softmax_state.hpp"
#include "cuda/decode/decode_cta.cuh"
#include "cuda/decode/decode_mainloop.cuh"
#include "cuda/decode/output_store.cuh"
#include "cuda/ptx/warp_reduce.cuh"

namespace flashkit::cuda::decode {

// The CTA's last step, shared by both kernels: `smem` holds each warp's normalised rows
// (f32 [kWarps][kRows][kHeadDim]) and their lse ([kWarps][kRows]); they merge in warp order
// (deterministic) with core::merge_weights and go to out / lse or to the split-K workspace.
template <int kWarps, int kRows, int kHeadDim, int kThreads>
__device__ __forceinline__ void merge_warps_and_store(const PagedParams& p, const DecodeCta& c,
                                                      const unsigned char* smem) {
  const auto& warp_o = *reinterpret_cast<const float(*)[kWarps][kRows][kHeadDim]>(smem);
  const auto& warp_lse = *reinterpret_cast<const float(*)[kWarps][kRows]>(smem + sizeof(warp_o));
  // Thread i finishes elements i, i + kThreads, ... of the rows; rows past c.rows are padding.
  for (int i = int(threadIdx.x); i < c.rows * kHeadDim; i += kThreads) {
    const int r = i / kHeadDim, e = i % kHeadDim;
    float o = 0.0f, l = -std::numeric_limits<float>::infinity();
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const core::MergeWeights<float> mw = core::merge_weights(l, warp_lse[w][r]);
      o = mw.w_a * o + mw.w_b * warp_o[w][r][e];
      l = mw.lse;
    }
    const QueryRow row = query_row(p, c, r);
    if (p.ws_o != nullptr) {
      const std::int64_t at =
          workspace_index(p, c.split, workspace_row(p, c.b, c.q_start, row.token), row.head);
      p.ws_o[at * kHeadDim + e] = o;
      if (e == 0) p.ws_lse[at] = l;
    } else {
      store_output(p, c.b, c.q_start, row.token, row.head, e, o, l);
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
