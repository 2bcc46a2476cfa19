// Paged decode v2/v3, stage 2: one warp per (query row, head) folds the num_splits partial states
// of the workspace with core::merge_weights, in split order (deterministic), and writes out and
// lse. It reads num_splits * (head_dim + 1) f32 per (row, head): at BENCH.md's batch-1 config
// (33 splits, 32 heads, d 128) 0.5 MB next to 128 MB of KV, but only 32 warps do it, so the
// loads of kBatch splits are issued before any of them is merged: the first version loaded one
// split per merge, 33 dependent memory latencies, ~0.5 us per split at batch 1 (measured: 66 and
// 132 splits ran 16 and 84 us slower than 33).
#include <cstdint>
#include <limits>

#include "core/softmax_state.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/decode/decode_launch.hpp"
#include "cuda/decode/output_store.cuh"

namespace flashkit::cuda::decode {

namespace {

constexpr int kWarps = 8;
constexpr int kBatch = 16;  // splits whose loads are in flight together

// kChunks: 32-element chunks of a row (head dim / 32).
template <int kChunks>
__global__ void __launch_bounds__(32 * kWarps)
    split_combine_kernel(const __grid_constant__ PagedParams p) {
  const std::int64_t pair = std::int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = int(threadIdx.x % 32);
  if (pair >= p.ws_rows * p.heads_q) return;
  const std::int64_t row = pair / p.heads_q;
  const int head = int(pair % p.heads_q);
  // Packed rows are addressed as token `row` of a batch-stride-0 layout; rows past the last
  // sequence's queries belong to no sequence and were never written by stage 1.
  int b = 0, token = int(row);
  if (p.cu_seqlens_q != nullptr) {
    if (row >= p.cu_seqlens_q[p.batch * p.cu_seqlens_stride]) return;
  } else {
    b = int(row / p.q_len);
    token = int(row % p.q_len);
  }
  float o[kChunks] = {};
  float lse = -std::numeric_limits<float>::infinity();
  for (int first = 0; first < p.num_splits; first += kBatch) {
    float part_lse[kBatch], part_o[kBatch][kChunks];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      if (first + i < p.num_splits) {
        const std::int64_t at = workspace_index(p, first + i, row, head);
        part_lse[i] = p.ws_lse[at];
#pragma unroll
        for (int k = 0; k < kChunks; ++k)
          part_o[i][k] = p.ws_o[at * (32 * kChunks) + k * 32 + lane];
      }
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      if (first + i < p.num_splits) {
        const core::MergeWeights<float> w = core::merge_weights(lse, part_lse[i]);
#pragma unroll
        for (int k = 0; k < kChunks; ++k) o[k] = w.w_a * o[k] + w.w_b * part_o[i][k];
        lse = w.lse;
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kChunks; ++k) store_output(p, b, 0, token, head, k * 32 + lane, o[k], lse);
}

template <int kChunks>
void launch_chunks(const PagedParams& p, cudaStream_t stream) {
  const std::int64_t pairs = p.ws_rows * p.heads_q;
  split_combine_kernel<kChunks>
      <<<unsigned((pairs + kWarps - 1) / kWarps), 32 * kWarps, 0, stream>>>(p);
  check_launch("paged decode split merge kernel");
}

}  // namespace

void launch_split_combine(const PagedParams& p, cudaStream_t stream) {
  // Head dims 64, 128, 256 (decode_shape.cuh's list; paged_attention.cu refuses the others).
  switch (p.head_dim) {
    case 64:
      return launch_chunks<2>(p, stream);
    case 128:
      return launch_chunks<4>(p, stream);
    default:
      return launch_chunks<8>(p, stream);
  }
}

}  // namespace flashkit::cuda::decode
