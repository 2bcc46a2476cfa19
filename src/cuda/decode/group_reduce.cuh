// Sums over the kLanes lanes of a lane group (kLanes a power of two: the lanes that share one
// K row), for kN values at once, leaving each lane only some of the sums (reduce-scatter):
// halving the values at each butterfly step costs kN/2 + kN/4 + ... shuffles instead of
// kN * log2(kLanes) for summing each value on every lane, and each sum is then scored once
// instead of on every lane. (kN = 16, kLanes = 16: 15 shuffles instead of 64.)
//
// After reduce_scatter, with kSpread = min(kN, kLanes), slot i of a lane whose group-local
// index is c holds the sum of value n = i * kSpread + (c % kSpread): kN / kSpread slots. Lanes
// that differ only in bits >= kSpread hold the same sums.
#pragma once

#include "cuda/ptx/warp_reduce.cuh"

namespace flashkit::cuda::decode {

template <int kN, int kLanes>
struct GroupSums {
  static constexpr int kSpread = kN < kLanes ? kN : kLanes;
  static constexpr int kSlots = kN / kSpread;
  // Slot of value n, and the group-local lane that holds it.
  static constexpr int slot_of(int n) { return n / kSpread; }
  static constexpr int lane_of(int n) { return n % kSpread; }
};

template <int kN, int kLanes, int kMask = 1>
__device__ __forceinline__ void reduce_scatter(float* v, int lane) {
  if constexpr (kMask < kLanes) {
    if constexpr (kN > 1) {
      // Keep the even or odd values (by this lane's bit), send the others to the partner.
      const bool odd = (lane & kMask) != 0;
#pragma unroll
      for (int i = 0; i < kN / 2; ++i) {
        const float even_v = v[2 * i], odd_v = v[2 * i + 1];
        v[i] = (odd ? odd_v : even_v) + ptx::shfl_xor(odd ? even_v : odd_v, kMask);
      }
      reduce_scatter<kN / 2, kLanes, kMask * 2>(v, lane);
    } else {
      v[0] += ptx::shfl_xor(v[0], kMask);
      reduce_scatter<1, kLanes, kMask * 2>(v, lane);
    }
  }
}

}  // namespace flashkit::cuda::decode
