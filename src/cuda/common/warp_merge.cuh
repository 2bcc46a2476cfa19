// The S-way merge of partial attention states (o_s, lse_s) by one warp: the form of
// core::merge_weights that merge_states (cuda/merge.cu) and the paged decode's split merge
// (decode/split_combine.cu) share. With m = max_s lse_s and w_s = exp(lse_s - m),
//   o = sum_s w_s o_s / sum_s w_s,   lse = m + log(sum_s w_s).
// States go in rounds of kRound: each lane loads its kVec elements of every state of the round
// and lane l the lse of states l (and l + 32), all at once (nothing waits on the weights), then
// one max and one sum across the warp weigh them; a later round rescales what the earlier ones
// summed, as the online softmax does. So a merge of up to kRound states is one memory round trip.
// (Measured with ncu on the decode split merge at batch 1, 33 splits: folding the states in
// order, an exp, a division and a log per state behind the previous one, 12 us; weights first
// and then the o loads in groups of 16, three to four dependent round trips, 8 us.)
//
// kRound and kVec set the instructions per byte: a round's loads, shuffles and FMAs are unrolled
// whatever the state count, and a warp weighs its states once for 32 * kVec elements. (ncu,
// cascade batch 64 / 4k / 256, 9 states of d 128: with kRound 32 and one element per lane the
// merge issued ~650 instructions per warp over 8192 warps, 0.74 per scheduler cycle, 9.2 us for
// 10 MB.) So callers pick the smallest round that holds their states and 4 elements per lane
// where the states are 16-byte (f32) or 8-byte (16-bit) aligned.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <limits>
#include <type_traits>

#include "cuda/common/dtype.cuh"
#include "cuda/ptx/warp_reduce.cuh"

namespace flashkit::cuda {

// kVec consecutive elements of a state as floats, in one load (4 elements: 16 bytes of f32, 8 of
// a 16-bit type; the caller guarantees the alignment).
template <int kVec, class State>
__device__ __forceinline__ void load_state(const State* at, float (&x)[kVec]) {
  if constexpr (kVec == 1) {
    x[0] = to_float(*at);
  } else if constexpr (sizeof(State) == 4) {
    static_assert(kVec == 4, "one 16-byte load");
    const float4 v = *reinterpret_cast<const float4*>(at);
    x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
  } else {
    static_assert(kVec == 4, "one 8-byte load");
    const uint2 v = *reinterpret_cast<const uint2*>(at);
    const State* e = reinterpret_cast<const State*>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) x[i] = to_float(e[i]);
  }
}

// The merged o of this lane's kVec elements, and the merged lse (every lane), of `states`
// states: state s's lse is lse[s * lse_stride], this lane's elements of its o start at
// o[s * o_stride] (read only where `has_element`; any value where the state saw no key, NaN
// included: it weighs 0). Every lane of the warp must call it. When no state saw a key, o is 0
// and lse -inf. kRound: states per round, a power of two up to 64 (kRound x kVec registers).
template <int kRound, int kVec, class State>
__device__ __forceinline__ void warp_merge(int states, const float* lse, std::int64_t lse_stride,
                                           const State* o, std::int64_t o_stride, bool has_element,
                                           float (&o_merged)[kVec], float& lse_merged) {
  static_assert(kRound >= 1 && kRound <= 64 && (kRound & (kRound - 1)) == 0, "1, 2, 4, ... 64");
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  constexpr int kLse = kRound > 32 ? kRound / 32 : 1;
  const int lane = int(threadIdx.x % 32);
  float m = kNegInf, l = 0.0f, acc[kVec] = {};
  for (int first = 0; first < states; first += kRound) {
    // Pointers stepped state by state (an address register per load in flight, not two).
    float x[kRound][kVec];
    const State* o_s = o + first * o_stride;
#pragma unroll
    for (int i = 0; i < kRound; ++i, o_s += o_stride) {
      if (has_element && first + i < states) {
        load_state<kVec>(o_s, x[i]);
      } else {
#pragma unroll
        for (int v = 0; v < kVec; ++v) x[i][v] = 0.0f;
      }
    }
    float lse_lane[kLse], w[kLse];
    float m_round = kNegInf;
#pragma unroll
    for (int j = 0; j < kLse; ++j) {
      const int in_round = 32 * j + lane, s = first + in_round;
      lse_lane[j] = in_round < kRound && s < states ? lse[s * lse_stride] : kNegInf;
      m_round = fmaxf(m_round, lse_lane[j]);
    }
    const float m_new = fmaxf(m, ptx::warp_max(m_round));
    if (m_new == kNegInf) continue;  // nothing seen yet (warp-uniform)
    const float rescale = m == kNegInf ? 0.0f : expf(m - m_new);
    float w_sum = 0.0f;
#pragma unroll
    for (int j = 0; j < kLse; ++j) w_sum += (w[j] = expf(lse_lane[j] - m_new));  // -inf: 0
    l = l * rescale + ptx::warp_sum(w_sum);
#pragma unroll
    for (int v = 0; v < kVec; ++v) acc[v] *= rescale;
#pragma unroll
    for (int i = 0; i < kRound; ++i) {
      const float w_i = __shfl_sync(0xffffffffu, w[i / 32], i % 32);
#pragma unroll
      for (int v = 0; v < kVec; ++v) acc[v] += w_i > 0.0f ? w_i * x[i][v] : 0.0f;
    }
    m = m_new;
  }
#pragma unroll
  for (int v = 0; v < kVec; ++v) o_merged[v] = l > 0.0f ? acc[v] / l : 0.0f;
  lse_merged = l > 0.0f ? m + logf(l) : kNegInf;
}

// Calls f(std::integral_constant<int, kRound>) with the smallest round in {4, 8, 16} that holds
// `states`, or `kWide` (the one-element-per-lane round of many states) beyond 16.
template <int kWide, class F>
__host__ __forceinline__ void with_merge_round(std::int64_t states, F&& f) {
  if (states <= 4) return f(std::integral_constant<int, 4>{});
  if (states <= 8) return f(std::integral_constant<int, 8>{});
  if (states <= 16) return f(std::integral_constant<int, 16>{});
  f(std::integral_constant<int, kWide>{});
}

}  // namespace flashkit::cuda
