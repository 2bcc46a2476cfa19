// Split-K in one kernel: the last split CTA of a tile to finish merges the tile's splits from the
// workspace and writes out and lse. Which CTA is last comes from a ticket per tile in the
// workspace (decode_backend.hpp), a 64-bit word of (epoch, count): every CTA adds itself with a
// compare-and-swap that restarts the count whenever the word holds another epoch, so the word
// needs no zeroing before a call (whatever a fresh workspace holds, unless its high half equals
// the call's epoch, a random 32-bit value per host call; paged_attention.cu), and the last CTA
// leaves (epoch, 0) behind, so that a CUDA graph replaying the call with its captured epoch
// starts every replay from zero. No CTA waits for another: the grid never needs to be resident.
// (v3.4-v3.10 merged the splits in a second kernel, whose launch after the last stage-1 CTA and
// 4.1 us under ncu were ~10 % of a batch-1 decode step: docs/kernels/decode.md v3.11.)
#pragma once

#include <cstdint>

#include "cuda/common/warp_merge.cuh"
#include "cuda/decode/decode_cta.cuh"
#include "cuda/decode/decode_params.hpp"
#include "cuda/decode/output_store.cuh"

namespace flashkit::cuda::decode {

// Rounds of the merge beyond 16 splits: the split plan makes at most 64 (one round trip).
constexpr int kWideRound = 64;

// True in every thread of the CTA that completed the tile's count; every thread calls it after
// storing its share of the CTA's partial states. `flag`: a shared int nothing else reads now (in
// the dynamic shared memory: a static __shared__ variable moved the ring 16 bytes off its
// 128-byte alignment, and every decode kernel, unsplit ones included, ran 15 % slower).
__device__ __forceinline__ bool last_split_of_tile(const PagedParams& p, const DecodeCta& c,
                                                   volatile int* flag) {
  __syncthreads();  // every thread's partial stores are issued
  if (threadIdx.x == 0) {
    // The tile's ticket: that of its first (query row, head) pair, unique per tile.
    const QueryRow first = query_row(p, c, 0);
    unsigned long long* ticket =
        p.ws_tickets + workspace_row(p, c.b, c.q_start, first.token) * p.heads_q + first.head;
    __threadfence();  // release: this CTA's partial states before its count
    const unsigned long long epoch = static_cast<unsigned long long>(p.ws_epoch) << 32;
    unsigned long long seen = *reinterpret_cast<volatile unsigned long long*>(ticket), mine;
    for (;;) {
      mine = (seen & ~0xffffffffull) == epoch ? seen + 1 : epoch + 1;
      const unsigned long long was = atomicCAS(ticket, seen, mine);
      if (was == seen) break;
      seen = was;
    }
    const bool last = (mine & 0xffffffffull) == static_cast<unsigned long long>(p.num_splits);
    if (last) {
      *ticket = epoch;  // the count back to zero; no other CTA of this call touches it again
      __threadfence();  // acquire: the other splits' states after their counts
    }
    *flag = last;
  }
  __syncthreads();
  return *flag != 0;
}

// The last CTA of a tile merges its rows' splits in split order (the same warp_merge, in the same
// order, as merge_states: deterministic whichever CTA is last) and stores out and lse. A warp per
// (row, 32 x kVec elements); up to 16 splits take 4 elements per lane where the workspace is
// 16-byte aligned.
template <int kWarps, int kRound, int kVec>
__device__ __forceinline__ void fold_rows(const PagedParams& p, const DecodeCta& c) {
  constexpr int kChunkElems = 32 * kVec;
  const int chunks = (p.head_dim + kChunkElems - 1) / kChunkElems;  // head dims 64, 128, 256
  const int lane = int(threadIdx.x % 32);
  for (int item = int(threadIdx.x / 32); item < c.rows * chunks; item += kWarps) {
    const QueryRow row = query_row(p, c, item / chunks);
    const std::int64_t ws_row = workspace_row(p, c.b, c.q_start, row.token);
    const int e = (item % chunks) * kChunkElems + lane * kVec;
    const bool has_element = e < p.head_dim;  // d 64 with 4 per lane: half the warp
    const std::int64_t at0 = workspace_index(p, 0, ws_row, row.head);
    const std::int64_t split_stride = workspace_index(p, 1, ws_row, row.head) - at0;
    float o[kVec], lse;
    warp_merge<kRound, kVec>(p.num_splits, p.ws_lse + at0, split_stride,
                             p.ws_o + at0 * p.head_dim + (has_element ? e : 0),
                             split_stride * p.head_dim, has_element, o, lse);
    if (!has_element) continue;
#pragma unroll
    for (int v = 0; v < kVec; ++v) {
      store_output(p, c.b, c.q_start, row.token, row.head, e + v, o[v], lse);
    }
  }
}

// After the CTA's rows went to the workspace (split calls only): the last split of the tile
// merges them all. `smem`: the CTA's dynamic shared memory, free once its rows are stored.
template <int kWarps>
__device__ __forceinline__ void fold_splits_if_last(const PagedParams& p, const DecodeCta& c,
                                                    unsigned char* smem) {
  if (!last_split_of_tile(p, c, reinterpret_cast<volatile int*>(smem))) return;
  if (p.num_splits <= 16 && std::uintptr_t(p.ws_o) % 16 == 0) {
    fold_rows<kWarps, 16, 4>(p, c);
  } else {
    fold_rows<kWarps, kWideRound, 1>(p, c);
  }
}

}  // namespace flashkit::cuda::decode
