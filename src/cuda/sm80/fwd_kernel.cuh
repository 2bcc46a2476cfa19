// The sm80 forward kernels (FlashAttention-2 class): tile scheduler + mainloop + epilogue, and
// their launch; K/V from contiguous tensors or from cache pages (kv_source.cuh). Included only
// by the generated per-head-dim instance files (fwd_instance.cu.in, fwd_paged_instance.cu.in).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/fwd_params.hpp"
#include "cuda/sm80/fwd_epilogue.cuh"
#include "cuda/sm80/fwd_mainloop.cuh"
#include "cuda/sm80/fwd_softmax.cuh"
#include "cuda/sm80/fwd_tile_scheduler.cuh"
#include "cuda/sm80/fwd_tile_shape.hpp"
#include "cuda/sm80/kv_block_range.hpp"
#include "cuda/sm80/kv_source.cuh"

namespace flashkit::cuda::sm80 {

// One CTA's query tile against the K/V rows of `source` (kv_source.cuh); kScoreMods: whether the
// kernel handles softcap and ALiBi (fwd_mainloop).
template <class T, bool kScoreMods, class Source>
__device__ __forceinline__ void fwd_cta(const FwdParams& p, const FwdTile& tile,
                                        const Source& source, unsigned char* smem) {
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
  if (range.first() >= 0) fwd_mainloop<T, kScoreMods>(p, tile, source, range, smem, acc);
  fwd_epilogue<T>(p, tile, source, acc, smem);
}

template <class T, bool kScoreMods>
__global__ void __launch_bounds__(T::kThreads, 1) fwd_kernel(const __grid_constant__ FwdParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  const FwdTile tile = fwd_tile<T::kBlockM>(p);
  if (tile.empty()) return;
  fwd_cta<T, kScoreMods>(p, tile, ContiguousKvSource{}, smem);
}

// K/V from cache pages: p.k, p.v and k_layout, v_layout are unused; sequence lengths come from
// kv.seq_lens (p.seqlen_k only bounds them).
template <class T>
__global__ void __launch_bounds__(T::kThreads, 1)
    fwd_paged_kernel(const __grid_constant__ FwdParams p,
                     const __grid_constant__ PagedKvParams kv) {
  extern __shared__ __align__(128) unsigned char smem[];
  FwdTile tile = fwd_tile<T::kBlockM>(p);
  if (tile.empty()) return;
  const PagedKv<typename T::Elem> source(kv, tile);
  fwd_cta<T, true>(p, tile, source, smem);
}

// One CTA per (query tile, head, grid_z sequence); kernels above 48 KB of dynamic shared memory
// must opt in to it, per device. name: the kernel, in errors.
template <class T, class Kernel, class... Args>
void launch_tiles(Kernel* kernel, const char* name, unsigned grid_z, const FwdParams& p,
                  cudaStream_t stream, const Args&... args) {
  const dim3 grid(unsigned((p.seqlen_q + T::kBlockM - 1) / T::kBlockM), unsigned(p.heads_q),
                  grid_z);
  if (grid.x == 0 || grid.z == 0) return;
  check_cuda(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes),
      (std::string(name) + ": shared memory limit").c_str());
  kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(p, args...);
  check_launch(name);
}

// Calls launch(traits) with the FwdTraits of the tile shape a CTA with smem_limit
// (tile_smem_limit(), common/device.hpp) runs: head dims whose shape depends on it have a kernel
// per shape.
template <class Elem, int kHeadDim, class Launch>
void with_tile_traits(int smem_limit, const Launch& launch) {
  if constexpr (fwd_shape_depends_on_smem(kHeadDim)) {
    if (fwd_tile_shape(kHeadDim, smem_limit) == fwd_tile_shape(kHeadDim, kSm80SmemLimit)) {
      return launch(FwdTraits<Elem, kHeadDim, kSm80SmemLimit>{});
    }
  }
  launch(FwdTraits<Elem, kHeadDim>{});
}

template <class Elem, int kHeadDim>
void launch_fwd(const FwdParams& p, int smem_limit, cudaStream_t stream) {
  with_tile_traits<Elem, kHeadDim>(smem_limit, [&](auto traits) {
    using T = decltype(traits);
    // Two kernels: calls without softcap or ALiBi (most) take the one without their code (d = 64
    // / 128 N 512 +4.0 / +2.9 % on an H100, where it drops spill reloads; sm80_fwd.md, v16).
    if (p.has_score_mods()) {
      launch_tiles<T>(fwd_kernel<T, true>, "sm80 forward kernel", unsigned(p.batch), p, stream);
    } else {
      launch_tiles<T>(fwd_kernel<T, false>, "sm80 forward kernel", unsigned(p.batch), p, stream);
    }
  });
}

// Grid z = cache sequences * key splits (kernel sequences, kv_source.cuh).
template <class Elem, int kHeadDim>
void launch_fwd_paged(const FwdParams& p, const PagedKvParams& kv, int smem_limit,
                      cudaStream_t stream) {
  with_tile_traits<Elem, kHeadDim>(smem_limit, [&](auto traits) {
    using T = decltype(traits);
    launch_tiles<T>(fwd_paged_kernel<T>, "sm80 paged forward kernel", unsigned(p.batch), p, stream,
                    kv);
  });
}

}  // namespace flashkit::cuda::sm80
