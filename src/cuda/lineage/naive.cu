// Naive attention in three kernels, every intermediate in global memory: the first step of the
// lineage, which FlashAttention removes (for N = 4096 and 16 heads S alone is 1 GiB of fp32).
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/softmax_state.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/dtype.cuh"
#include "cuda/common/score.cuh"
#include "cuda/common/stream_buffer.hpp"
#include "cuda/lineage/lineage.hpp"
#include "cuda/ptx/warp_reduce.cuh"

namespace flashkit::cuda {

namespace {

constexpr int kTile = 16;  // 16x16 output tiles, 256 threads: a textbook shared-memory matmul
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// S[bh, i, j] = masked score of query i and key j; -inf where hidden or past the sequence.
__global__ void naive_scores(FwdParams p, float* s) {
  __shared__ float qs[kTile][kTile + 1];
  __shared__ float ks[kTile][kTile + 1];
  const int bh = blockIdx.z, b = bh / p.heads_q, h = bh % p.heads_q, hk = h / p.group();
  const int i = blockIdx.y * kTile + threadIdx.y, j = blockIdx.x * kTile + threadIdx.x;
  const core::SeqSpan sp = sequence_span(p, b);
  const int kj = blockIdx.x * kTile + threadIdx.y;  // the key row this thread loads
  float dot = 0.0f;
  for (int e0 = 0; e0 < p.head_dim; e0 += kTile) {
    const int e = e0 + threadIdx.x;
    qs[threadIdx.y][threadIdx.x] =
        (i < sp.len_q && e < p.head_dim)
            ? load_as_float(p.q, p.in_dtype,
                            core::element_offset(p.q_layout, b, sp.q_start, i, h) + e)
            : 0.0f;
    ks[threadIdx.y][threadIdx.x] =
        (kj < sp.len_k && e < p.head_dim)
            ? load_as_float(p.k, p.in_dtype,
                            core::element_offset(p.k_layout, b, sp.k_start, kj, hk) + e)
            : 0.0f;
    __syncthreads();
    for (int c = 0; c < kTile; ++c) dot += qs[threadIdx.y][c] * ks[threadIdx.x][c];
    __syncthreads();
  }
  if (i >= p.seqlen_q || j >= p.seqlen_k) return;
  const std::int64_t diag = i + core::diagonal_shift(p.mask, sp.len_q, sp.len_k);
  const bool visible = i < sp.len_q && key_is_visible(p.mask, diag, j, sp.len_k);
  s[(std::int64_t(bh) * p.seqlen_q + i) * p.seqlen_k + j] =
      visible ? score_of(p, dot, alibi_slope(p, b, h), diag, j) : kNegInf;
}

// P = softmax(S) row by row, in place; one warp per row. Writes lse.
__global__ void naive_softmax(FwdParams p, float* s) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= p.batch * p.heads_q * p.seqlen_q) return;
  const int bh = row / p.seqlen_q, i = row % p.seqlen_q, b = bh / p.heads_q, h = bh % p.heads_q;
  const core::SeqSpan sp = sequence_span(p, b);
  if (i >= sp.len_q) return;
  float* srow = s + std::int64_t(row) * p.seqlen_k;
  const float log2e = float(core::kLog2e);
  core::SoftmaxState<float> state;  // base 2, as everywhere
  float m = kNegInf;
  for (int j = lane; j < p.seqlen_k; j += 32) m = fmaxf(m, srow[j]);
  state.m = ptx::warp_max(m) * log2e;
  const float m_use = state.m == kNegInf ? 0.0f : state.m;
  float l = 0.0f;
  for (int j = lane; j < p.seqlen_k; j += 32) l += exp2f(srow[j] * log2e - m_use);
  state.l = ptx::warp_sum(l);
  const float inv_l = state.l > 0.0f ? 1.0f / state.l : 0.0f;
  for (int j = lane; j < p.seqlen_k; j += 32) srow[j] = exp2f(srow[j] * log2e - m_use) * inv_l;
  if (lane == 0 && p.lse != nullptr) {
    p.lse[core::element_offset(p.lse_layout, b, sp.q_start, i, h)] = state.lse();
  }
}

// O = P V.
__global__ void naive_pv(FwdParams p, const float* prob) {
  __shared__ float ps[kTile][kTile + 1];
  __shared__ float vs[kTile][kTile + 1];
  const int bh = blockIdx.z, b = bh / p.heads_q, h = bh % p.heads_q, hk = h / p.group();
  const int i = blockIdx.y * kTile + threadIdx.y, e = blockIdx.x * kTile + threadIdx.x;
  const core::SeqSpan sp = sequence_span(p, b);
  const float* prow = prob + std::int64_t(bh) * p.seqlen_q * p.seqlen_k;
  float acc = 0.0f;
  for (int j0 = 0; j0 < sp.len_k; j0 += kTile) {
    const int jp = j0 + threadIdx.x, jv = j0 + threadIdx.y;
    ps[threadIdx.y][threadIdx.x] =
        (i < sp.len_q && jp < sp.len_k) ? prow[std::int64_t(i) * p.seqlen_k + jp] : 0.0f;
    vs[threadIdx.y][threadIdx.x] =
        (jv < sp.len_k && e < p.head_dim_v)
            ? load_as_float(p.v, p.in_dtype,
                            core::element_offset(p.v_layout, b, sp.k_start, jv, hk) + e)
            : 0.0f;
    __syncthreads();
    for (int c = 0; c < kTile; ++c) acc += ps[threadIdx.y][c] * vs[c][threadIdx.x];
    __syncthreads();
  }
  if (i < sp.len_q && e < p.head_dim_v) {
    store_from_float(p.out, p.out_dtype,
                     core::element_offset(p.out_layout, b, sp.q_start, i, h) + e, acc);
  }
}

int tiles(int n) {
  return (n + kTile - 1) / kTile;
}

}  // namespace

void naive_forward(const FwdParams& p, cudaStream_t stream) {
  const std::int64_t rows = std::int64_t(p.batch) * p.heads_q * p.seqlen_q;
  if (rows == 0) return;
  StreamBuffer s(std::size_t(rows) * std::size_t(p.seqlen_k) * sizeof(float), stream);
  const dim3 block(kTile, kTile);
  const int bh = p.batch * p.heads_q;
  if (p.seqlen_k > 0) {  // else every row saw no key: softmax writes lse = -inf, P V writes 0
    naive_scores<<<dim3(tiles(p.seqlen_k), tiles(p.seqlen_q), bh), block, 0, stream>>>(
        p, s.as<float>());
    check_launch("naive_scores");
  }
  constexpr int kRowsPerCta = 8;  // one warp per row
  naive_softmax<<<unsigned((rows + kRowsPerCta - 1) / kRowsPerCta), 32 * kRowsPerCta, 0, stream>>>(
      p, s.as<float>());
  check_launch("naive_softmax");
  naive_pv<<<dim3(tiles(p.head_dim_v), tiles(p.seqlen_q), bh), block, 0, stream>>>(p,
                                                                                   s.as<float>());
  check_launch("naive_pv");
}

}  // namespace flashkit::cuda
