// The S-way merge of partial attention states (o_s, lse_s) by one warp: the form of
// core::merge_weights that merge_states (cuda/merge.cu) and the paged decode's split merge
// (decode/split_combine.cu) share. With m = max_s lse_s and w_s = exp(lse_s - m),
//   o = sum_s w_s o_s / sum_s w_s,   lse = m + log(sum_s w_s).
// States go in rounds of kRound: each lane loads its element of every state of the round and
// lane l the lse of states l (and l + 32), all at once (nothing waits on the weights), then one
// max and one sum across the warp weigh them; a later round rescales what the earlier ones
// summed, as the online softmax does. So a merge of up to kRound states is one memory round trip.
// (Measured with ncu on the decode split merge at batch 1, 33 splits: folding the states in
// order, an exp, a division and a log per state behind the previous one, 12 us; weights first
// and then the o loads in groups of 16, three to four dependent round trips, 8 us.)
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <limits>

#include "cuda/ptx/warp_reduce.cuh"

namespace flashkit::cuda {

__device__ __forceinline__ float state_float(float x) {
  return x;
}
__device__ __forceinline__ float state_float(__half x) {
  return __half2float(x);
}
__device__ __forceinline__ float state_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

// The merged o of this lane's element, and the merged lse (every lane), of `states` states:
// state s's lse is lse[s * lse_stride], this lane's element of its o is o[s * o_stride] (read
// only where `has_element`; any value where the state saw no key, NaN included: it weighs 0).
// Every lane of the warp must call it. When no state saw a key, o is 0 and lse -inf.
// kRound: states per round, 32 or 64 (a register each, and 1 or 2 lse per lane).
template <int kRound, class State>
__device__ __forceinline__ void warp_merge(int states, const float* lse, std::int64_t lse_stride,
                                           const State* o, std::int64_t o_stride, bool has_element,
                                           float& o_merged, float& lse_merged) {
  static_assert(kRound == 32 || kRound == 64, "one or two lse per lane");
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  constexpr int kLse = kRound / 32;
  const int lane = int(threadIdx.x % 32);
  float m = kNegInf, l = 0.0f, acc = 0.0f;
  for (int first = 0; first < states; first += kRound) {
    // Pointers stepped state by state (an address register per load in flight, not two).
    float x[kRound];
    const State* o_s = o + first * o_stride;
#pragma unroll
    for (int i = 0; i < kRound; ++i, o_s += o_stride) {
      x[i] = has_element && first + i < states ? state_float(*o_s) : 0.0f;
    }
    float lse_lane[kLse], w[kLse];
    float m_round = kNegInf;
#pragma unroll
    for (int j = 0; j < kLse; ++j) {
      const int s = first + 32 * j + lane;
      lse_lane[j] = s < states ? lse[s * lse_stride] : kNegInf;
      m_round = fmaxf(m_round, lse_lane[j]);
    }
    const float m_new = fmaxf(m, ptx::warp_max(m_round));
    if (m_new == kNegInf) continue;  // nothing seen yet (warp-uniform)
    const float rescale = m == kNegInf ? 0.0f : expf(m - m_new);
    float w_sum = 0.0f;
#pragma unroll
    for (int j = 0; j < kLse; ++j) w_sum += (w[j] = expf(lse_lane[j] - m_new));  // -inf: 0
    l = l * rescale + ptx::warp_sum(w_sum);
    acc *= rescale;
#pragma unroll
    for (int i = 0; i < kRound; ++i) {
      const float w_i = __shfl_sync(0xffffffffu, w[i / 32], i % 32);
      acc += w_i > 0.0f ? w_i * x[i] : 0.0f;
    }
    m = m_new;
  }
  o_merged = l > 0.0f ? acc / l : 0.0f;
  lse_merged = l > 0.0f ? m + logf(l) : kNegInf;
}

}  // namespace flashkit::cuda
