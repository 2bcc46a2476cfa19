// Butterfly reductions over the lanes of a warp with shfl.sync.bfly: after the call every lane
// taking part holds the result. A "quad" is the 4 lanes (4k..4k+3) that share a row of an
// mma.sync accumulator fragment, so a row max or sum of a fragment is a quad reduction.
#pragma once

#include <cstdint>

namespace flashkit::cuda::ptx {

__device__ __forceinline__ float shfl_xor(float v, int lane_mask) {
  float r;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;\n"
               : "=f"(r)
               : "f"(v), "r"(lane_mask));
  return r;
}

template <int kLanes>
__device__ __forceinline__ float reduce_max(float v) {
  static_assert(kLanes == 4 || kLanes == 32, "quad or full warp");
#pragma unroll
  for (int m = kLanes / 2; m >= 1; m /= 2) v = fmaxf(v, shfl_xor(v, m));
  return v;
}

template <int kLanes>
__device__ __forceinline__ float reduce_sum(float v) {
  static_assert(kLanes == 4 || kLanes == 32, "quad or full warp");
#pragma unroll
  for (int m = kLanes / 2; m >= 1; m /= 2) v += shfl_xor(v, m);
  return v;
}

__device__ __forceinline__ float quad_max(float v) {
  return reduce_max<4>(v);
}
__device__ __forceinline__ float quad_sum(float v) {
  return reduce_sum<4>(v);
}
__device__ __forceinline__ float warp_max(float v) {
  return reduce_max<32>(v);
}
__device__ __forceinline__ float warp_sum(float v) {
  return reduce_sum<32>(v);
}

}  // namespace flashkit::cuda::ptx
