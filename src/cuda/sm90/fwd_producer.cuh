// The producer warpgroup of the sm90 forward: one thread issues every TMA copy of the CTA, tile
// after tile (fwd_tile_scheduler.cuh). Per tile: the first K, Q; then, for the i-th visited
// block, K of block i + 1 before V of block i: a consumer needs the next K (S = Q K^T of the next
// block is issued first) while it still multiplies by the current V. Each copy waits until its
// stage's or buffer's previous occupant has been released (fwd_sync.hpp).
#pragma once

#include <cstdint>

#include "cuda/common/fwd_params.hpp"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/tma.cuh"
#include "cuda/sm80/fwd_tile_scheduler.cuh"
#include "cuda/sm80/kv_block_range.hpp"
#include "cuda/sm90/fwd_maps.hpp"
#include "cuda/sm90/fwd_sync.hpp"
#include "cuda/sm90/fwd_tile_scheduler.cuh"
#include "cuda/sm90/fwd_tile_shape.hpp"

namespace flashkit::cuda::sm90 {

// Where a tile of `rows` tokens of one head starts in the maps' [batch, tokens, heads, d] view
// (packed varlen tensors are batch 0 with the sequence's offset added).
struct TokenCoord {
  int head, token, batch;
};

template <class T>
__device__ __forceinline__ void load_slabs(unsigned char* dst, int rows, const CUtensorMap& map,
                                           std::uint64_t* bar, TokenCoord at) {
#pragma unroll
  for (int s = 0; s < T::kSlabs; ++s) {
    const int c[4] = {s * 64, at.head, at.token, at.batch};
    ptx::tma_load<4>(dst + s * rows * T::kSlabBytesPerRow, map, bar, c);
  }
}

// Fills stage `it % kStages` of one operand (it: the block's running count) with block n, once the
// consumers released the stage's previous use (use u waits for phase u - 1 of the empty barrier).
template <class T>
__device__ __forceinline__ void load_kv(unsigned char* tiles, std::uint64_t* full,
                                        std::uint64_t* empty, const CUtensorMap& map, int it,
                                        TokenCoord at) {
  const int stage = it % T::kStages;
  const int use = it / T::kStages;
  if (use > 0) ptx::mbarrier_wait(&empty[stage], std::uint32_t(use - 1) & 1);
  ptx::mbarrier_arrive_expect_tx(&full[stage], T::kKvBytes);
  load_slabs<T>(tiles + stage * T::kKvBytes, T::kBlockN, map, &full[stage], at);
}

// One tile's copies. blocks: the CTA's count of blocks so far (stage and phase of each copy),
// advanced by the tile's; q_use: its count of tiles before this one (which Q buffer, which use).
template <class T>
__device__ __forceinline__ void produce_tile(const FwdParams& p, const FwdMaps& maps,
                                             const sm80::FwdTile& tile, unsigned char* smem,
                                             FwdBarriers& bar, int& blocks, int q_use) {
  const sm80::KvBlockRange range = sm80::kv_block_range(
      p.mask, tile.row_begin, tile.row_end - 1, tile.span.len_q, tile.span.len_k, T::kBlockN);
  const int batch = p.cu_seqlens_q != nullptr ? 0 : tile.batch;
  auto block_at = [&](int n) {
    return TokenCoord{tile.head_kv, int(tile.span.k_start) + n * T::kBlockN, batch};
  };
  int n = range.first();
  // The first K before Q: with one Q buffer, its stage frees before the buffer does (the
  // consumers release Q only after the previous tile's epilogue).
  if (n >= 0) load_kv<T>(smem + T::kKOffset, bar.k_full, bar.k_empty, maps.k, blocks, block_at(n));
  const int buffer = q_use % T::kQBuffers, use = q_use / T::kQBuffers;
  if (use > 0) ptx::mbarrier_wait(&bar.q_empty[buffer], std::uint32_t(use - 1) & 1);
  if (n < 0) {
    ptx::mbarrier_arrive(&bar.q_full[buffer]);  // nothing to load: the epilogue writes zeros
    return;
  }
  ptx::mbarrier_arrive_expect_tx(&bar.q_full[buffer], T::kQBytes);
  load_slabs<T>(smem + buffer * T::kQBytes, T::kBlockM, maps.q, &bar.q_full[buffer],
                {tile.head, int(tile.span.q_start) + tile.row_begin, batch});
  for (; n >= 0; ++blocks) {
    const int next = range.next(n);
    if (next >= 0) {
      load_kv<T>(smem + T::kKOffset, bar.k_full, bar.k_empty, maps.k, blocks + 1, block_at(next));
    }
    load_kv<T>(smem + T::kVOffset, bar.v_full, bar.v_empty, maps.v, blocks, block_at(n));
    n = next;
  }
}

template <class T, bool kPersistent>
__device__ __forceinline__ void fwd_producer(const FwdParams& p, const FwdMaps& maps,
                                             unsigned char* smem, FwdBarriers& bar) {
  ptx::tma_prefetch_descriptor(maps.q);
  ptx::tma_prefetch_descriptor(maps.k);
  ptx::tma_prefetch_descriptor(maps.v);
  const FwdWalk<T::kBlockM, kPersistent> walk(p);
  int blocks = 0, q_use = 0;
  for (int slot = 0; !walk.done(p, slot); ++slot) {
    const sm80::FwdTile tile = walk.tile(p, slot);
    if (tile.empty()) continue;
    produce_tile<T>(p, maps, tile, smem, bar, blocks, q_use++);
  }
}

}  // namespace flashkit::cuda::sm90
