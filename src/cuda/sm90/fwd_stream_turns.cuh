// Turns between the two streams of a CTA (FwdCta, fwd_kernel.cuh): their consumer warpgroups
// issue their GEMMs strictly alternately, stream 0 first, so one's softmax runs while the other's
// GEMMs hold the tensor cores — the pingpong of warpgroups that share a tile, here between
// warpgroups that walk their own tiles, so turns run on across tile ends.
//
// A turn is one issue: a tile's first S, each S + P V pair, its last P V (blocks + 1 turns for a
// tile of `blocks` blocks). Stream 0's turn j follows stream 1's turn j - 1, stream 1's turn j
// follows stream 0's turn j; a warpgroup syncs on its own named barrier (schedule + stream, 256
// threads) and the other arrives on it. The two walks take different numbers of turns (tiles per
// walk, blocks per tile), so each warpgroup first counts the other's turns: a wait or an arrival
// that the other side will not match is skipped, and every barrier ends as it began.
#pragma once

#include "cuda/common/fwd_params.hpp"
#include "cuda/ptx/warpgroup.cuh"
#include "cuda/sm80/kv_block_range.hpp"
#include "cuda/sm90/fwd_sync.hpp"
#include "cuda/sm90/fwd_tile_scheduler.cuh"

namespace flashkit::cuda::sm90 {

// The turns a walk takes in all, counted by a warp, a slot per lane at a time.
template <int kBlockN, class Walk>
__device__ __forceinline__ int walk_turns(const FwdParams& p, const Walk& walk, int lane) {
  int turns = 0;
  for (int slot = lane; !walk.done(p, slot); slot += 32) {
    const sm80::FwdTile tile = walk.tile(p, slot);
    if (tile.empty()) continue;
    const sm80::KvBlockRange range = sm80::kv_block_range(
        p.mask, tile.row_begin, tile.row_end - 1, tile.span.len_q, tile.span.len_k, kBlockN);
    if (range.first() >= 0) turns += range.count() + 1;
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    turns += __shfl_xor_sync(0xffffffffu, turns, offset);
  return turns;
}

template <int kStreams>
struct StreamTurns {
  __device__ __forceinline__ void wait() {}
  __device__ __forceinline__ void pass() {}
};

template <>
struct StreamTurns<2> {
  int stream;       // 0 or 1
  int other_turns;  // the turns the other stream's walk takes
  int taken = 0;    // this stream's turns so far

  __device__ __forceinline__ void wait() {
    const int after = stream == 0 ? taken - 1 : taken;  // the other's turn this one follows
    if (after >= 0 && after < other_turns) {
      ptx::named_barrier_sync(fwd_barrier_of(FwdNamedBarrier::schedule, stream), 256);
    }
  }
  __device__ __forceinline__ void pass() {
    const int follower = stream == 0 ? taken : taken + 1;  // the other's turn that follows
    if (follower < other_turns) {
      ptx::named_barrier_arrive(fwd_barrier_of(FwdNamedBarrier::schedule, 1 - stream), 256);
    }
    ++taken;
  }
};

}  // namespace flashkit::cuda::sm90
