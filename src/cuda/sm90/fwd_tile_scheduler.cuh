// Which query tiles a CTA of the sm90 forward owns, and how many CTAs a call launches.
//
// Work is handed out in units, numbered as the sm80 forward numbers its CTAs: the query tile
// fastest, last tile first (under a causal mask the last tiles see the most keys, so they start
// first), then the query head, then the sequence.
//  - One CTA per tile: varlen batches, tile shapes without room for a persistent CTA
//    (FwdTraits::kPersistentFits), calls with no more units than a persistent grid has walkers,
//    and calls without a mask from 8192 keys on (fwd_walk_persistent).
//  - Otherwise persistent: FwdTraits::kWalkersPerSm walkers per SM, walker b taking units b,
//    b + walkers, b + 2 walkers, ... The producer then loads the next tile's first K (and,
//    with two Q buffers, its Q) while the consumers still finish this one (fwd_sync.hpp), which
//    saves per tile a CTA launch, the barrier set-up and the load latency. The static round robin
//    needs units of equal work: without a mask a unit is one tile (all visit every KV block); under
//    a mask it is the pair of query tiles m and q_tiles - 1 - m of one (sequence, head), whose
//    block counts sum to the same number under a causal mask (tiles one by one over a static
//    round robin left SMs idle at the end of the grid: docs/kernels/sm90_fwd.md, v4, -5 to
//    -29 %).
#pragma once

#include <cstdint>

#include "core/mask_rules.hpp"
#include "cuda/common/fwd_params.hpp"
#include "cuda/sm80/fwd_tile_scheduler.cuh"

namespace flashkit::cuda::sm90 {

// Slot s = 0, 1, ... of a walk names one tile (or none). kPersistent: stream `stream` of CTA b
// (of kStreams a CTA, fwd_kernel.cuh) is walker w = b kStreams + stream of gridDim.x kStreams and
// takes units w, w + walkers, ... until they run out. Otherwise the grid is (query tiles, heads,
// sequences) and the CTA runs the one tile its block index names, with no division.
template <int kBlockM, bool kPersistent, int kStreams = 1>
struct FwdWalk {
  int q_tiles;    // query tiles per (sequence, head)
  int per_unit;   // tiles per unit: 1, or 2 (a pair under a mask)
  int unit_span;  // units per (sequence, head)
  int stream;     // the walker's stream in its CTA (0 with one stream a CTA)

  FLASHKIT_HD explicit FwdWalk(const FwdParams& p, int stream_of_cta = 0)
      : q_tiles(int((p.seqlen_q + kBlockM - 1) / kBlockM)),
        per_unit(kPersistent && core::masks_anything(p.mask) ? 2 : 1),
        unit_span((q_tiles + per_unit - 1) / per_unit),
        stream(stream_of_cta) {}

  // All units of the call (the launch checks that they number at most 2^31 - 1).
  FLASHKIT_HD std::int64_t units(const FwdParams& p) const {
    return std::int64_t(unit_span) * p.heads_q * p.batch;
  }
  // blockIdx and gridDim read where used: as fields they held two registers through the
  // mainloop (d = 128: 25 spill instructions). per_unit is 1 or 2: a shift, not a division.
  __device__ __forceinline__ int unit_of(int slot) const {
    const int pass = slot >> (per_unit - 1);
    if constexpr (kStreams == 1) return int(blockIdx.x + pass * gridDim.x);
    return int(blockIdx.x) * kStreams + stream + pass * int(gridDim.x) * kStreams;
  }
  __device__ __forceinline__ bool done(const FwdParams& p, int slot) const {
    return kPersistent ? unit_of(slot) >= unit_span * p.heads_q * p.batch : slot > 0;
  }

  // The tile of a slot; empty when it has none (the second of a pair whose first is the middle
  // tile; a varlen sequence shorter than the grid assumed). The persistent walk divides by
  // p.walk_* (fwd_walk_divisors).
  __device__ __forceinline__ sm80::FwdTile tile(const FwdParams& p, int slot) const {
    if (!kPersistent) return sm80::fwd_tile<kBlockM>(p);
    const int unit = unit_of(slot);
    const int bh = p.walk_span.div(unit), in_span = unit - bh * unit_span;
    const bool second = (slot & (per_unit - 1)) != 0;
    sm80::FwdTile t;
    t.m_block = second ? in_span : q_tiles - 1 - in_span;
    t.batch = p.walk_heads.div(bh);
    t.head = bh - t.batch * p.heads_q;
    t.head_kv = p.walk_group.div(t.head);  // GQA: a head index mapping, no K/V copies
    t.span = sequence_span(p, t.batch);
    t.row_begin = t.m_block * kBlockM;
    const int end = t.row_begin + kBlockM;
    t.row_end = end < t.span.len_q ? end : int(t.span.len_q);
    if (second && t.m_block == q_tiles - 1 - in_span) t.row_end = t.row_begin;
    return t;
  }
};

// p with the divisors its persistent walk of kBlockM-row tiles takes (FwdParams::walk_*).
template <int kBlockM>
inline FwdParams fwd_walk_divisors(const FwdParams& p) {
  FwdParams w = p;
  w.walk_span = make_fast_div(FwdWalk<kBlockM, true>(p).unit_span);
  w.walk_heads = make_fast_div(p.heads_q);
  w.walk_group = make_fast_div(p.group());
  return w;
}

// Whether a call takes the persistent walk over `ctas` walkers (FwdTraits::kWalkersPerSm per SM):
// more units than CTAs, and tiles whose lengths a static round robin balances: equal without a
// mask, pairs of equal sum under a causal mask, and no varlen batch (sequences of any length).
// Without a mask it also needs fewer than 8192 keys: d = 128 takes 176-key blocks from there,
// whose CTA has no room for a second Q buffer. Below, the walk gains at d = 128 N = 4k +1.5 %
// since the warpgroup index is uniform (v13, before it: -1..-2 %; docs/kernels/sm90_fwd.md, v32).
template <int kBlockM>
inline bool fwd_walk_persistent(const FwdParams& p, int ctas) {
  return p.cu_seqlens_q == nullptr && (core::masks_anything(p.mask) || p.seqlen_k < 8192) &&
         FwdWalk<kBlockM, true>(p).units(p) > ctas;
}

// Whether d = 256's walk with one Q buffer (FwdTraits::kWalkReleasesQAfterS) beats a CTA per tile:
// in the suite's harness on the H200 (docs/kernels/sm90_fwd.md, v40; two A/Bs) +2.6-4.1 % at 512
// keys with or without a causal mask and -0.3..+3.0 % causal at 1k-2k, but -2..-8 % without a mask
// from 1k keys and -1..-8 % causal from 4k. In 64-key blocks (fwd_shape at short keys) one CTA a
// tile was 4.1-6.8 % slower than the walk on an H100 at N 512, causal 512 and 1k (v51).
inline bool fwd_one_q_walk_pays(const FwdParams& p) {
  return p.seqlen_k <= 512 || (core::masks_anything(p.mask) && p.seqlen_k <= 2048);
}

}  // namespace flashkit::cuda::sm90
