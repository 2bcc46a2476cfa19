// The persistent tile scheduler of the sm90 forward: the grid is one CTA per SM (fewer when there
// are fewer tiles), and CTA b runs tiles b, b + grid, b + 2 grid, ... of one linear order, so a
// CTA's next tile starts loading while its last one is still in the epilogue, and no CTA is
// launched per tile.
//
// The order: under a mask whose tiles cost different amounts (causal, window), the last query
// tiles, which see the most keys, come first across every head and sequence (longest first keeps
// the tail short). Otherwise the tiles of one (sequence, head) are adjacent, so the CTAs running at
// once share K and V in L2.
#pragma once

#include <cstdint>

#include "core/mask_rules.hpp"
#include "cuda/common/fwd_params.hpp"
#include "cuda/sm80/fwd_tile_scheduler.cuh"

namespace flashkit::cuda::sm90 {

struct FwdTileScheduler {
  int m_blocks, heads, batch;
  bool longest_first;

  __host__ __device__ FwdTileScheduler(const FwdParams& p, int block_m)
      : m_blocks((p.seqlen_q + block_m - 1) / block_m),
        heads(p.heads_q),
        batch(p.batch),
        longest_first(core::masks_anything(p.mask)) {}

  __host__ __device__ std::int64_t tiles() const { return std::int64_t(m_blocks) * heads * batch; }

  template <int kBlockM>
  __device__ sm80::FwdTile tile(const FwdParams& p, std::int64_t t) const {
    sm80::FwdTile r;
    std::int64_t head_seq;
    if (longest_first) {
      r.m_block = m_blocks - 1 - int(t / (std::int64_t(heads) * batch));
      head_seq = t % (std::int64_t(heads) * batch);
    } else {
      r.m_block = int(t % m_blocks);
      head_seq = t / m_blocks;
    }
    r.head = int(head_seq % heads);
    r.batch = int(head_seq / heads);
    r.head_kv = r.head / p.group();
    r.span = sequence_span(p, r.batch);
    r.row_begin = r.m_block * kBlockM;
    const int end = r.row_begin + kBlockM;
    r.row_end = end < r.span.len_q ? end : int(r.span.len_q);
    return r;
  }
};

}  // namespace flashkit::cuda::sm90
