// Paged decode v2/v3, stage 2: one warp per (query row, head, 32 x kVec elements of the head dim)
// merges the num_splits partial states of the workspace (common/warp_merge.cuh: every split's
// loads in flight at once, up to 64; deterministic, the same order every run) and writes out and
// lse. Up to 16 splits a lane merges 4 elements (16-byte loads) where the workspace is 16-byte
// aligned; more splits keep one element per lane, so that a round of up to 64 stays one round
// trip (BENCH.md's batch-1 config: 33 splits, 32 heads, d 128, 128 warps over 0.5 MB). (v1 to
// v3.3 folded the splits in order, one warp per (row, head): 32 warps, each a chain of 33
// exp / log / divide steps; 12 us under ncu, next to 43 us of stage 1.)
#include <cstdint>

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/warp_merge.cuh"
#include "cuda/decode/decode_launch.hpp"
#include "cuda/decode/output_store.cuh"

namespace flashkit::cuda::decode {

namespace {

constexpr int kWarps = 4;
constexpr int kWideRound = 64;  // the split plan makes at most 64 splits: one round trip

template <int kRound, int kVec>
__global__ void __launch_bounds__(32 * kWarps)
    split_combine_kernel(const __grid_constant__ PagedParams p) {
  constexpr int kChunkElems = 32 * kVec;
  const int chunks = (p.head_dim + kChunkElems - 1) / kChunkElems;  // head dims 64, 128, 256
  const std::int64_t item = std::int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (item >= p.ws_rows * p.heads_q * chunks) return;  // warp-uniform
  const std::int64_t pair = item / chunks;
  const std::int64_t row = pair / p.heads_q;
  const int head = int(pair % p.heads_q);
  const int e = int(item % chunks) * kChunkElems + int(threadIdx.x % 32) * kVec;
  // Packed rows are addressed as token `row` of a batch-stride-0 layout; rows past the last
  // sequence's queries belong to no sequence and were never written by stage 1.
  int b = 0, token = int(row);
  if (p.cu_seqlens_q != nullptr) {
    if (row >= p.cu_seqlens_q[p.batch * p.cu_seqlens_stride]) return;  // warp-uniform
  } else {
    b = int(row / p.q_len);
    token = int(row % p.q_len);
  }
  // Split s of (row, head) is s * split_stride entries after split 0's (workspace_index).
  const std::int64_t at0 = workspace_index(p, 0, row, head);
  const std::int64_t split_stride = workspace_index(p, 1, row, head) - at0;
  const bool has_element = e < p.head_dim;  // d 64 with 4 per lane: half the warp
  float o[kVec], lse;
  warp_merge<kRound, kVec>(p.num_splits, p.ws_lse + at0, split_stride,
                           p.ws_o + at0 * p.head_dim + (has_element ? e : 0),
                           split_stride * p.head_dim, has_element, o, lse);
  if (!has_element) return;
#pragma unroll
  for (int v = 0; v < kVec; ++v) store_output(p, b, 0, token, head, e + v, o[v], lse);
}

}  // namespace

void launch_split_combine(const PagedParams& p, cudaStream_t stream) {
  // head_dim is a multiple of 64, so with an aligned base every 4-element run is 16-byte aligned.
  const bool vec = std::uintptr_t(p.ws_o) % 16 == 0;
  const auto launch = [&](auto kernel, int elems_per_lane) {
    const int chunks = (p.head_dim + 32 * elems_per_lane - 1) / (32 * elems_per_lane);
    const std::int64_t items = p.ws_rows * p.heads_q * chunks;
    kernel<<<unsigned((items + kWarps - 1) / kWarps), 32 * kWarps, 0, stream>>>(p);
  };
  with_merge_round<kWideRound>(p.num_splits, [&](auto round) {
    constexpr int kRound = decltype(round)::value;
    if constexpr (kRound != kWideRound) {
      if (vec) return launch(split_combine_kernel<kRound, 4>, 4);
    }
    launch(split_combine_kernel<kWideRound, 1>, 1);
  });
  check_launch("paged decode split merge kernel");
}

}  // namespace flashkit::cuda::decode
