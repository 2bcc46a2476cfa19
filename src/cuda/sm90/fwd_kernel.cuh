// The sm90 forward kernel (FlashAttention-3 class): warp-specialised producer / consumers over a
// TMA + mbarrier pipeline, wgmma for both GEMMs, each CTA walking its tiles
// (fwd_tile_scheduler.cuh: persistent where tiles are of equal length); and its launch. Included
// only by the generated per-head-dim instance files (fwd_instance.cu.in), which are compiled for
// sm_90a alone.
#pragma once

#include <cuda_runtime.h>

#include <limits>
#include <string>

#include "core/validate.hpp"

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/fwd_params.hpp"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/warpgroup.cuh"
#include "cuda/sm80/fwd_softmax.cuh"
#include "cuda/sm80/kv_block_range.hpp"
#include "cuda/sm90/fwd_epilogue.cuh"
#include "cuda/sm90/fwd_kv_source.cuh"
#include "cuda/sm90/fwd_mainloop.cuh"
#include "cuda/sm90/fwd_maps.hpp"
#include "cuda/sm90/fwd_paged_rows.cuh"
#include "cuda/sm90/fwd_producer.cuh"
#include "cuda/sm90/fwd_tile_scheduler.cuh"
#include "cuda/sm90/fwd_tile_shape.hpp"

namespace flashkit::cuda::sm90 {

// kPersistent: the CTA's kStreams streams (FwdCta) walk tiles s, s + streams, ... (stream s of
// CTA b is walker b kStreams + s of gridDim.x kStreams); otherwise the CTA runs one tile. Source:
// where K and V come from and the tile's rows go (fwd_kv_source.cuh).
template <class T, bool kPersistent, class Source, int kStreams>
__global__ void __launch_bounds__(FwdCta<T, kStreams>::kThreads, FwdCta<T, kStreams>::kPerSm)
    fwd_kernel(const __grid_constant__ FwdParams p, const __grid_constant__ FwdMaps maps,
               const __grid_constant__ Source src) {
  using Cta = FwdCta<T, kStreams>;
  static_assert(kStreams == 1 || (kPersistent && Source::kProducerThreads == 1),
                "streams walk persistently, each with one producer thread");
  // The Q buffer released after the tile's last S (FwdTraits::kWalkReleasesQAfterS).
  constexpr bool kQAfterS = kPersistent && T::kWalkReleasesQAfterS;
  extern __shared__ unsigned char smem_raw[];
  const std::uint32_t raw = ptx::smem_address(smem_raw);
  unsigned char* const smem_cta = smem_raw + (((raw + 1023u) & ~1023u) - raw);
  auto barriers_of = [&](int stream) -> FwdBarriers& {
    return *reinterpret_cast<FwdBarriers*>(smem_cta + stream * Cta::kStreamBytes +
                                           T::kBarrierOffset);
  };

  if (threadIdx.x == 0) {
    for (int stream = 0; stream < kStreams; ++stream) {
      FwdBarriers& bar = barriers_of(stream);
      for (int b = 0; b < T::kQBuffers; ++b) {
        ptx::mbarrier_init(&bar.q_full[b], 1);
        // One elected thread per warpgroup, or every consumer thread (kQAfterS).
        ptx::mbarrier_init(&bar.q_empty[b], kQAfterS ? T::kConsumerThreads : T::kConsumers);
      }
      for (int s = 0; s < T::kStages; ++s) {
        ptx::mbarrier_init(&bar.k_full[s], Source::kProducerThreads);
        ptx::mbarrier_init(&bar.v_full[s], Source::kProducerThreads);
        ptx::mbarrier_init(&bar.k_empty[s], T::kConsumerThreads);
        ptx::mbarrier_init(&bar.v_empty[s], T::kConsumerThreads);
      }
      ptx::mbarrier_init(&bar.fix, 1);
      ptx::mbarrier_init(&bar.o_read, T::kConsumers);
    }
    ptx::mbarrier_init_fence();
  }
  __syncthreads();

  // Warp-uniform by construction, but the compiler cannot see it from threadIdx: through a
  // shuffle from lane 0 it can, and keeps what derives from it (stage and barrier addresses, wgmma
  // descriptors) on the uniform datapath (d = 128: 8336 -> 8087 instructions from the first HGMMA
  // to the last; d = 64 N 512 +5.5 %, d = 128 N 512 +3.4 %, sm90_fwd.md v31).
  const int warpgroup = __shfl_sync(0xffffffffu, int(threadIdx.x) / 128, 0);
  using Walk = FwdWalk<T::kBlockM, kPersistent, kStreams>;
  if (warpgroup == 0) {
    ptx::warpgroup_reg_dealloc<Cta::kProducerRegs>();
    if constexpr (Source::kProducerThreads == 1) {
      const int stream = kStreams == 1 ? 0 : int(threadIdx.x) / 32;  // warp s, lane 0
      if (threadIdx.x % 32 == 0 && threadIdx.x / 32 < kStreams) {
        fwd_producer<T, kPersistent, kStreams>(
            p, maps, src, stream, smem_cta + stream * Cta::kStreamBytes, barriers_of(stream), 0);
      }
    } else {
      static_assert(Source::kProducerThreads == 128, "one thread or the whole warpgroup");
      fwd_producer<T, kPersistent, kStreams>(p, maps, src, 0, smem_cta, barriers_of(0),
                                             int(threadIdx.x));
    }
    return;
  }
  ptx::warpgroup_reg_alloc<Cta::kConsumerRegs>();
  const int wg = warpgroup - 1;  // among the CTA's consumer warpgroups
  const int stream = kStreams == 1 ? 0 : wg / T::kConsumers;
  const int consumer = kStreams == 1 ? wg : wg % T::kConsumers;  // among the stream's
  const int tid = threadIdx.x - 128 - stream * T::kConsumerThreads;
  unsigned char* const smem = smem_cta + stream * Cta::kStreamBytes;
  FwdBarriers& bar = barriers_of(stream);
  const Walk walk(p, stream);
  int blocks = 0, q_use = 0;  // the stream's blocks and tiles so far (fwd_sync.hpp)
  for (int slot = 0; !walk.done(p, slot); ++slot) {
    sm80::FwdTile tile = walk.tile(p, slot);
    if (tile.empty()) continue;
    src.set_keys(tile);
    const int buffer = q_use % T::kQBuffers;
    const std::uint32_t q_parity = std::uint32_t(q_use / T::kQBuffers) & 1;
    unsigned char* q = smem + buffer * T::kQBytes;
    sm80::FwdAccum<T> acc;
#pragma unroll
    for (int dn = 0; dn < T::kD / 8; ++dn)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc.o[0][dn][i] = 0.0f;
    acc.row[0][0] = {};
    acc.row[0][1] = {};
    {
      const sm80::KvBlockRange range = sm80::kv_block_range(
          p.mask, tile.row_begin, tile.row_end - 1, tile.span.len_q, tile.span.len_k, T::kBlockN);
      if (range.first() >= 0) {
        fwd_consumer_mainloop<T, Source::kKvThroughGenericProxy, kQAfterS>(
            p, tile, range, smem, ptx::smem_address(q), &bar.q_full[buffer], q_parity,
            &bar.q_empty[buffer], bar, tid, consumer, blocks, acc);
      } else {
        ptx::mbarrier_wait(&bar.q_full[buffer], q_parity);  // the producer's turn of the buffer
        if constexpr (kQAfterS) ptx::mbarrier_arrive(&bar.q_empty[buffer]);
      }
    }
    // Re-derived from a copy of the slot the compiler cannot see through, so that the tile's
    // fields are not held live through the mainloop (with them, ptxas spilled at d = 128).
    tile = walk.tile(p, opaque(slot));
    // Where O is staged for its TMA store, and the barrier its release arrives on.
    unsigned char* const staging = kQAfterS ? smem + T::kVOffset : q;
    std::uint64_t* const staged_read = kQAfterS ? &bar.o_read : &bar.q_empty[buffer];
    fwd_epilogue<T, kQAfterS>(p, maps, src, tile, staging, staged_read, tid, consumer, wg, acc);
    ++q_use;
  }
  if (threadIdx.x % 128 == 0) ptx::tma_store_wait<0>();  // out is complete when the kernel ends
}

// started: an event the launch records once every CTA has begun (a launch completion event), or
// nullptr.
template <class Kernel, class Source>
void launch_grid(Kernel kernel, dim3 grid, int threads, int smem_bytes, const FwdParams& p,
                 const FwdMaps& maps, const Source& src, cudaStream_t stream,
                 cudaEvent_t started = nullptr) {
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes),
             "sm90 forward: shared memory limit");
  if (started == nullptr) {
    kernel<<<grid, threads, smem_bytes, stream>>>(p, maps, src);
  } else {
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeLaunchCompletionEvent;
    attribute.val.launchCompletionEvent.event = started;
    attribute.val.launchCompletionEvent.flags = 0;
    cudaLaunchConfig_t config{};
    config.gridDim = grid;
    config.blockDim = dim3(unsigned(threads));
    config.dynamicSmemBytes = std::size_t(smem_bytes);
    config.stream = stream;
    config.attrs = &attribute;
    config.numAttrs = 1;
    check_cuda(cudaLaunchKernelEx(&config, kernel, p, maps, src), "sm90 forward kernel");
  }
  check_launch("sm90 forward kernel");
}

template <class T>
void check_units(const FwdParams& p) {
  const std::int64_t units = FwdWalk<T::kBlockM, false>(p).units(p);
  if (units > std::numeric_limits<int>::max()) {
    core::fail("q",
               "at most 2^31 - 1 query tiles of " + std::to_string(T::kBlockM) +
                   " rows (batch x heads_q x tiles per sequence)",
               std::to_string(units));
  }
}

template <class Elem, int kHeadDim, int kConsumers, int kBlockN>
void launch_fwd_with(const FwdParams& p, const FwdMaps& maps, int multiprocessors,
                     cudaStream_t stream) {
  using T = FwdTraits<Elem, kHeadDim, kConsumers, kBlockN>;
  if (FwdWalk<T::kBlockM, false>(p).units(p) == 0) return;
  check_units<T>(p);
  // The persistent walk: one-consumer walkers three to a CTA, as its streams (FwdCta).
  constexpr int kStreams = kConsumers == 1 ? 3 : 1;
  using W = FwdTraits<Elem, kHeadDim, kConsumers, kBlockN, kStreams>;
  if constexpr (W::kPersistentFits) {
    const int walkers = multiprocessors * W::kWalkersPerSm;
    if (fwd_walk_persistent<W::kBlockM>(p, walkers) &&
        (!W::kWalkReleasesQAfterS || fwd_one_q_walk_pays(p))) {
      using Cta = FwdCta<W, kStreams>;
      return launch_grid(fwd_kernel<W, true, ContiguousSource, kStreams>,
                         dim3(unsigned(walkers / kStreams)), Cta::kThreads, Cta::kSmemBytes,
                         fwd_walk_divisors<W::kBlockM>(p), maps, ContiguousSource{}, stream);
    }
  }
  const dim3 grid(unsigned(FwdWalk<T::kBlockM, false>(p).q_tiles), unsigned(p.heads_q),
                  unsigned(p.batch));
  launch_grid(fwd_kernel<T, false, ContiguousSource, 1>, grid, T::kThreads, T::kSmemBytes, p, maps,
              ContiguousSource{}, stream);
}

// shape: fwd_shape of the call, which also sized the maps' boxes.
template <class Elem, int kHeadDim>
void launch_fwd(const FwdParams& p, const FwdMaps& maps, FwdShape shape, int multiprocessors,
                cudaStream_t stream) {
  constexpr FwdShape a = fwd_long_open_shape(kHeadDim), b = fwd_short_masked_shape(kHeadDim);
  if (shape == a) {
    return launch_fwd_with<Elem, kHeadDim, a.consumers, a.block_n>(p, maps, multiprocessors,
                                                                   stream);
  }
  launch_fwd_with<Elem, kHeadDim, b.consumers, b.block_n>(p, maps, multiprocessors, stream);
}

// K and V from cache pages (PagedSource or PagedRowSource): one CTA per tile (the grid as
// without persistence), in the shape fwd_paged_shape gives; p.seqlen_k only bounds the
// sequences' key counts.
template <class Elem, int kHeadDim, class Source>
void launch_fwd_paged(const FwdParams& p, const FwdMaps& maps, const Source& src,
                      cudaStream_t stream, cudaEvent_t started) {
  constexpr FwdShape s = fwd_paged_shape(kHeadDim);
  using T = FwdTraits<Elem, kHeadDim, s.consumers, s.block_n>;
  if (FwdWalk<T::kBlockM, false>(p).units(p) == 0) return;
  check_units<T>(p);
  const dim3 grid(unsigned(FwdWalk<T::kBlockM, false>(p).q_tiles), unsigned(p.heads_q),
                  unsigned(p.batch));
  launch_grid(fwd_kernel<T, false, Source, 1>, grid, T::kThreads, T::kSmemBytes, p, maps, src,
              stream, started);
}

}  // namespace flashkit::cuda::sm90
