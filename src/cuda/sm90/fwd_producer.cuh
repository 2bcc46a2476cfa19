// The producer warpgroup of the sm90 forward: one thread issues every TMA copy of the CTA. Q once;
// then K and V of each visited block into stage it % 2, each on its own barrier so S = Q K^T can
// start before V has landed. A stage is refilled only after both consumer warpgroups released it
// (kv_empty), which they do once their P V has read it.
#pragma once

#include <cstdint>

#include "cuda/common/fwd_params.hpp"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/tma.cuh"
#include "cuda/sm80/fwd_tile_scheduler.cuh"
#include "cuda/sm80/kv_block_range.hpp"
#include "cuda/sm90/fwd_maps.hpp"
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

template <class T>
__device__ __forceinline__ void fwd_producer(const FwdParams& p, const FwdMaps& maps,
                                             const sm80::FwdTile& tile,
                                             const sm80::KvBlockRange& range, unsigned char* smem,
                                             FwdBarriers& bar) {
  const bool varlen = p.cu_seqlens_q != nullptr;
  const int batch = varlen ? 0 : tile.batch;
  ptx::tma_prefetch_descriptor(maps.q);
  ptx::tma_prefetch_descriptor(maps.k);
  ptx::tma_prefetch_descriptor(maps.v);
  ptx::mbarrier_arrive_expect_tx(&bar.q_full, T::kQBytes);
  load_slabs<T>(smem, T::kBlockM, maps.q, &bar.q_full,
                {tile.head, int(tile.span.q_start) + tile.row_begin, batch});
  int it = 0;
  for (int n = range.first(); n >= 0; n = range.next(n), ++it) {
    const int stage = it % T::kStages;
    const std::uint32_t use = std::uint32_t(it / T::kStages);
    // Use u of a stage needs the consumers' release of use u - 1 (phase u - 1 of kv_empty).
    if (use > 0) ptx::mbarrier_wait(&bar.kv_empty[stage], (use - 1) & 1);
    const TokenCoord at{tile.head_kv, int(tile.span.k_start) + n * T::kBlockN, batch};
    ptx::mbarrier_arrive_expect_tx(&bar.k_full[stage], T::kKvBytes);
    load_slabs<T>(smem + T::kKOffset + stage * T::kKvBytes, T::kBlockN, maps.k, &bar.k_full[stage],
                  at);
    ptx::mbarrier_arrive_expect_tx(&bar.v_full[stage], T::kKvBytes);
    load_slabs<T>(smem + T::kVOffset + stage * T::kKvBytes, T::kBlockN, maps.v, &bar.v_full[stage],
                  at);
  }
}

}  // namespace flashkit::cuda::sm90
