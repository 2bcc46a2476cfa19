// Paged decode v2, stage 2: one warp per (query row, head) folds the num_splits partial states
// of the workspace with core::merge_weights, in split order (deterministic), and writes out and
// lse. It reads num_splits * (head_dim + 1) f32 per (row, head): at BENCH.md's batch-1 config
// (33 splits, 32 heads, d 128) 0.5 MB next to 128 MB of KV.
#include <cstdint>
#include <limits>

#include "core/softmax_state.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/decode/decode_launch.hpp"
#include "cuda/decode/output_store.cuh"

namespace flashkit::cuda::decode {

namespace {

constexpr int kWarps = 8;
constexpr int kMaxChunks = 8;  // 32-element chunks of a row: head dims up to 256

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
  const int chunks = p.head_dim / 32;
  float o[kMaxChunks] = {};
  float lse = -std::numeric_limits<float>::infinity();
  for (int split = 0; split < p.num_splits; ++split) {
    const std::int64_t at = workspace_index(p, split, row, head);
    const core::MergeWeights<float> w = core::merge_weights(lse, p.ws_lse[at]);
#pragma unroll
    for (int k = 0; k < kMaxChunks; ++k) {
      if (k < chunks) o[k] = w.w_a * o[k] + w.w_b * p.ws_o[at * p.head_dim + k * 32 + lane];
    }
    lse = w.lse;
  }
#pragma unroll
  for (int k = 0; k < kMaxChunks; ++k) {
    if (k < chunks) store_output(p, b, 0, token, head, k * 32 + lane, o[k], lse);
  }
}

}  // namespace

void launch_split_combine(const PagedParams& p, cudaStream_t stream) {
  const std::int64_t pairs = p.ws_rows * p.heads_q;
  split_combine_kernel<<<unsigned((pairs + kWarps - 1) / kWarps), 32 * kWarps, 0, stream>>>(p);
  check_launch("paged decode split merge kernel");
}

}  // namespace flashkit::cuda::decode
