// The sm80 forward kernel (FlashAttention-2 class): tile scheduler + mainloop + epilogue, and
// its launch. Included only by the generated per-head-dim instance files (fwd_instance.cu.in).
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/fwd_params.hpp"
#include "cuda/sm80/fwd_epilogue.cuh"
#include "cuda/sm80/fwd_mainloop.cuh"
#include "cuda/sm80/fwd_softmax.cuh"
#include "cuda/sm80/fwd_tile_scheduler.cuh"
#include "cuda/sm80/fwd_tile_shape.hpp"
#include "cuda/sm80/kv_block_range.hpp"

namespace flashkit::cuda::sm80 {

template <class T>
__global__ void __launch_bounds__(T::kThreads, 1) fwd_kernel(const __grid_constant__ FwdParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  const FwdTile tile = fwd_tile<T::kBlockM>(p);
  if (tile.empty()) return;
  FwdAccum<T> acc;
#pragma unroll
  for (int mt = 0; mt < T::kMmaM; ++mt) {
#pragma unroll
    for (int dn = 0; dn < T::kD / 8; ++dn)
#pragma unroll
      for (int idx = 0; idx < 4; ++idx) acc.o[mt][dn][idx] = 0.0f;
    acc.row[mt][0] = {};
    acc.row[mt][1] = {};
  }
  const KvBlockRange range = kv_block_range(p.mask, tile.row_begin, tile.row_end - 1,
                                            tile.span.len_q, tile.span.len_k, T::kBlockN);
  if (range.first() >= 0) fwd_mainloop<T>(p, tile, range, smem, acc);
  fwd_epilogue<T>(p, tile, acc);
}

template <class Elem, int kHeadDim>
void launch_fwd(const FwdParams& p, cudaStream_t stream) {
  using T = FwdTraits<Elem, kHeadDim>;
  const dim3 grid(unsigned((p.seqlen_q + T::kBlockM - 1) / T::kBlockM), unsigned(p.heads_q),
                  unsigned(p.batch));
  if (grid.x == 0 || grid.z == 0) return;
  // Above 48 KB a kernel must opt in to its dynamic shared memory, per device.
  check_cuda(cudaFuncSetAttribute(fwd_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  T::kSmemBytes),
             "sm80 forward: shared memory limit");
  fwd_kernel<T><<<grid, T::kThreads, T::kSmemBytes, stream>>>(p);
  check_launch("sm80 forward kernel");
}

}  // namespace flashkit::cuda::sm80
