// The tensor-core decode epilogue: each warp's rows become (o / l, lse) in shared memory (the
// ring, free once every warp has left the loop), then the warps merge and store exactly as the
// CUDA-core kernel's do (decode_epilogue.cuh).
#pragma once

#include "cuda/decode/decode_cta.cuh"
#include "cuda/decode/decode_epilogue.cuh"
#include "cuda/decode/mma_mainloop.cuh"
#include "cuda/ptx/warp_reduce.cuh"

namespace flashkit::cuda::decode {

template <class Shape, bool kFold>
__device__ __forceinline__ void mma_finish_cta(const PagedParams& p, const DecodeCta& c,
                                               MmaLane<Shape>& s, unsigned char* smem) {
  constexpr int kRows = Shape::kRowsPerCta, kHeadDim = Shape::kHeadDimV, kWarps = Shape::kWarps;
  const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32);
  const int g = lane / 4, t = lane % 4;

  // Row g's l was summed per lane over its keys; the quad holds all of them.
  s.softmax.l = ptx::quad_sum(s.softmax.l);
  const float lse = s.softmax.lse();
  float inv_l = s.softmax.l > 0.0f ? 1.0f / s.softmax.l : 0.0f;
  if constexpr (Shape::kFp8) inv_l *= s.v_ref;  // o holds O^T / v_ref (mma_mainloop.cuh)
  // O^T columns 2t and 2t + 1 are rows whose l lives in quads 2t and 2t + 1.
  const float inv0 = __shfl_sync(0xffffffffu, inv_l, 8 * t);
  const float inv1 = __shfl_sync(0xffffffffu, inv_l, 8 * t + 4);

  auto& warp_o = *reinterpret_cast<float(*)[kWarps][kRows][kHeadDim]>(smem);
  auto& warp_lse = *reinterpret_cast<float(*)[kWarps][kRows]>(smem + sizeof(warp_o));
  __syncthreads();  // every warp is done with its ring
#pragma unroll
  for (int sl = 0; sl < Shape::kSlices; ++sl) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int d = o_dim<Shape>(sl, h, g);
      warp_o[warp][2 * t][d] = s.o[sl][2 * h] * inv0;
      warp_o[warp][2 * t + 1][d] = s.o[sl][2 * h + 1] * inv1;
    }
  }
  if (t == 0) warp_lse[warp][g] = lse;
  __syncthreads();
  merge_warps_and_store<kWarps, kRows, kHeadDim, Shape::kThreads, kFold>(p, c, smem);
}

}  // namespace flashkit::cuda::decode
