// The sm90 forward kernel (FlashAttention-3 class): warp-specialised producer / consumers over a
// TMA + mbarrier pipeline, wgmma for both GEMMs, and its launch. Included only by the generated
// per-head-dim instance files (fwd_instance.cu.in), which are compiled for sm_90a alone.
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/fwd_params.hpp"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/warpgroup.cuh"
#include "cuda/sm80/fwd_softmax.cuh"
#include "cuda/sm80/fwd_tile_scheduler.cuh"
#include "cuda/sm80/kv_block_range.hpp"
#include "cuda/sm90/fwd_epilogue.cuh"
#include "cuda/sm90/fwd_mainloop.cuh"
#include "cuda/sm90/fwd_maps.hpp"
#include "cuda/sm90/fwd_producer.cuh"
#include "cuda/sm90/fwd_tile_shape.hpp"

namespace flashkit::cuda::sm90 {

template <class T>
__global__ void __launch_bounds__(T::kThreads, 1)
    fwd_kernel(const __grid_constant__ FwdParams p, const __grid_constant__ FwdMaps maps) {
  extern __shared__ unsigned char smem_raw[];
  const std::uint32_t raw = ptx::smem_address(smem_raw);
  unsigned char* smem = smem_raw + (((raw + 1023u) & ~1023u) - raw);
  FwdBarriers& bar = *reinterpret_cast<FwdBarriers*>(smem + T::kBarrierOffset);

  const sm80::FwdTile tile = sm80::fwd_tile<T::kBlockM>(p);
  if (tile.empty()) return;
  const sm80::KvBlockRange range = sm80::kv_block_range(
      p.mask, tile.row_begin, tile.row_end - 1, tile.span.len_q, tile.span.len_k, T::kBlockN);
  const bool any_block = range.first() >= 0;

  if (threadIdx.x == 0) {
    ptx::mbarrier_init(&bar.q_full, 1);
    for (int s = 0; s < T::kStages; ++s) {
      ptx::mbarrier_init(&bar.k_full[s], 1);
      ptx::mbarrier_init(&bar.v_full[s], 1);
      ptx::mbarrier_init(&bar.k_empty[s], T::kConsumerThreads);
      ptx::mbarrier_init(&bar.v_empty[s], T::kConsumerThreads);
    }
    ptx::mbarrier_init_fence();
  }
  __syncthreads();

  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {
    ptx::warpgroup_reg_dealloc<T::kProducerRegs>();
    if (threadIdx.x == 0 && any_block) fwd_producer<T>(p, maps, tile, range, smem, bar);
    return;
  }
  ptx::warpgroup_reg_alloc<T::kConsumerRegs>();
  const int consumer = warpgroup - 1;
  sm80::FwdAccum<T> acc;
#pragma unroll
  for (int dn = 0; dn < T::kD / 8; ++dn)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc.o[0][dn][i] = 0.0f;
  acc.row[0][0] = {};
  acc.row[0][1] = {};
  if (any_block) fwd_consumer_mainloop<T>(p, tile, range, smem, bar, consumer, acc);
  fwd_epilogue<T>(p, maps, tile, smem, consumer, acc);
}

template <class Elem, int kHeadDim, int kConsumers, int kBlockN>
void launch_fwd_with(const FwdParams& p, const FwdMaps& maps, cudaStream_t stream) {
  using T = FwdTraits<Elem, kHeadDim, kConsumers, kBlockN>;
  const dim3 grid(unsigned((p.seqlen_q + T::kBlockM - 1) / T::kBlockM), unsigned(p.heads_q),
                  unsigned(p.batch));
  if (grid.x == 0 || grid.z == 0) return;
  check_cuda(cudaFuncSetAttribute(fwd_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  T::kSmemBytes),
             "sm90 forward: shared memory limit");
  fwd_kernel<T><<<grid, T::kThreads, T::kSmemBytes, stream>>>(p, maps);
  check_launch("sm90 forward kernel");
}

// shape: fwd_shape of the call, which also sized the maps' boxes.
template <class Elem, int kHeadDim>
void launch_fwd(const FwdParams& p, const FwdMaps& maps, FwdShape shape, cudaStream_t stream) {
  constexpr FwdShape a = fwd_long_open_shape(kHeadDim), b = fwd_short_masked_shape(kHeadDim);
  if (shape == a) return launch_fwd_with<Elem, kHeadDim, a.consumers, a.block_n>(p, maps, stream);
  launch_fwd_with<Elem, kHeadDim, b.consumers, b.block_n>(p, maps, stream);
}

}  // namespace flashkit::cuda::sm90
