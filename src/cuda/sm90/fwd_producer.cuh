// The producer warpgroup of the sm90 forward: Source::kProducerThreads of its threads (one, or
// all 128 for cache pages copied row by row) issue every copy of the CTA, tile after tile
// (fwd_tile_scheduler.cuh), from where its Source says (fwd_kv_source.cuh); thread 0 alone
// copies Q. Per tile:
// the first K, Q; then, for the i-th visited block, K of block i + 1 before V of block i: a
// consumer needs the next K (S = Q K^T of the next block is issued first) while it still
// multiplies by the current V. Each copy waits until its
// stage's or buffer's previous occupant has been released (fwd_sync.hpp).
#pragma once

#include <cstdint>

#include "cuda/common/fwd_params.hpp"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/tma.cuh"
#include "cuda/sm80/fwd_tile_scheduler.cuh"
#include "cuda/sm80/kv_block_range.hpp"
#include "cuda/sm90/fwd_kv_source.cuh"
#include "cuda/sm90/fwd_maps.hpp"
#include "cuda/sm90/fwd_sync.hpp"
#include "cuda/sm90/fwd_tile_scheduler.cuh"
#include "cuda/sm90/fwd_tile_shape.hpp"

namespace flashkit::cuda::sm90 {

// Fills stage `it % kStages` of one operand (it: the block's running count) with block n, once the
// consumers released the stage's previous use (use u waits for phase u - 1 of the empty barrier).
template <class T, class Source>
__device__ __forceinline__ void load_kv(const Source& src, unsigned char* tiles,
                                        std::uint64_t* full, std::uint64_t* empty,
                                        const FwdMaps& maps, KvOperand op, int it,
                                        const typename Source::Keys& keys, int n, ProducerFix* fix,
                                        int thread) {
  const int stage = it % T::kStages;
  const int use = it / T::kStages;
  if (use > 0) ptx::mbarrier_wait(&empty[stage], std::uint32_t(use - 1) & 1);
  src.template load_kv<T>(tiles + stage * T::kKvBytes, maps, op, &full[stage], keys, n, fix,
                          thread);
}

// One tile's copies. blocks: the CTA's count of blocks so far (stage and phase of each copy),
// advanced by the tile's; q_use: its count of tiles before this one (which Q buffer, which use);
// thread: this producer thread (0 .. Source::kProducerThreads - 1).
template <class T, bool kOStagedOverV, class Source>
__device__ __forceinline__ void produce_tile(const FwdParams& p, const FwdMaps& maps,
                                             const Source& src, sm80::FwdTile tile,
                                             unsigned char* smem, FwdBarriers& bar,
                                             ProducerFix& fix, int& blocks, int q_use, int thread) {
  src.set_keys(tile);
  const sm80::KvBlockRange range = sm80::kv_block_range(
      p.mask, tile.row_begin, tile.row_end - 1, tile.span.len_q, tile.span.len_k, T::kBlockN);
  const typename Source::Keys keys = src.keys(p, tile);
  int n = range.first();
  // The first K before Q: with one Q buffer, its stage frees before the buffer does (the
  // consumers release Q after the previous tile's epilogue, or in d = 256's walk after its last
  // S, which follows that K stage's release).
  if (n >= 0) {
    load_kv<T>(src, smem + T::kKOffset, bar.k_full, bar.k_empty, maps, KvOperand::k, blocks, keys,
               n, nullptr, thread);
  }
  const int buffer = q_use % T::kQBuffers, use = q_use / T::kQBuffers;
  if (thread == 0) {
    if (use > 0) ptx::mbarrier_wait(&bar.q_empty[buffer], std::uint32_t(use - 1) & 1);
    if (n < 0)
      ptx::mbarrier_arrive(&bar.q_full[buffer]);  // nothing to load: the epilogue writes zeros
  }
  if (n < 0) return;
  if (thread == 0) {
    ptx::mbarrier_arrive_expect_tx(&bar.q_full[buffer], T::kQBytes);
    src.template load_q<T>(smem + buffer * T::kQBytes, p, maps, &bar.q_full[buffer], tile);
  }
  for (bool first = true; n >= 0; ++blocks, first = false) {
    const int next = range.next(n);
    if (next >= 0) {
      load_kv<T>(src, smem + T::kKOffset, bar.k_full, bar.k_empty, maps, KvOperand::k, blocks + 1,
                 keys, next, nullptr, thread);
    }
    // d = 256's walk stages the last tile's O over the V stages (fwd_epilogue.cuh).
    if (kOStagedOverV && first && q_use > 0 && thread == 0) {
      ptx::mbarrier_wait(&bar.o_read, std::uint32_t(q_use - 1) & 1);
    }
    load_kv<T>(src, smem + T::kVOffset, bar.v_full, bar.v_empty, maps, KvOperand::v, blocks, keys,
               n, &fix, thread);
    n = next;
  }
}

// stream: the CTA's stream this producer thread loads for, whose tiles it walks
// (fwd_tile_scheduler.cuh).
template <class T, bool kPersistent, int kStreams, class Source>
__device__ __forceinline__ void fwd_producer(const FwdParams& p, const FwdMaps& maps,
                                             const Source& src, int stream, unsigned char* smem,
                                             FwdBarriers& bar, int thread) {
  if (thread == 0) {
    ptx::tma_prefetch_descriptor(maps.q);
    if constexpr (!Source::kKvThroughGenericProxy) {
      ptx::tma_prefetch_descriptor(maps.k);
      ptx::tma_prefetch_descriptor(maps.v);
    }
  }
  const FwdWalk<T::kBlockM, kPersistent, kStreams> walk(p, stream);
  int blocks = 0, q_use = 0;
  ProducerFix fix{&bar.fix, 0};
  for (int slot = 0; !walk.done(p, slot); ++slot) {
    const sm80::FwdTile tile = walk.tile(p, slot);
    if (tile.empty()) continue;
    produce_tile<T, kPersistent && T::kWalkReleasesQAfterS>(p, maps, src, tile, smem, bar, fix,
                                                            blocks, q_use++, thread);
  }
}

}  // namespace flashkit::cuda::sm90
