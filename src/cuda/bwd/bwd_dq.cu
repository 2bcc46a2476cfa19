// dQ: one CTA per (sequence, query head, 16-query block); KV blocks stream past while dQ
// accumulates in shared memory, so it is written once (deterministic, no atomics).
#include <cstdint>

#include "cuda/bwd/bwd_kernels.hpp"
#include "cuda/bwd/bwd_tile.cuh"
#include "cuda/common/cuda_check.hpp"

namespace flashkit::cuda {

namespace {

__global__ void __launch_bounds__(kBwdThreads) bwd_dq(BwdParams bp) {
  extern __shared__ float smem[];
  const FwdParams& p = bp.f;
  const int d = p.head_dim, dv = p.head_dim_v;
  float* q = smem;
  float* dout = q + kBwdTile * d;
  float* dq = dout + kBwdTile * dv;
  float* k = dq + kBwdTile * d;
  float* v = k + kBwdTile * d;
  float* prob = v + kBwdTile * dv;
  float* ds = prob + kBwdTile * kBwdPitch;
  float* lse = ds + kBwdTile * kBwdPitch;
  float* drow = lse + kBwdTile;

  const int b = blockIdx.z, h = blockIdx.y, hk = h / p.group();
  const core::SeqSpan sp = sequence_span(p, b);
  const std::int64_t i0 = std::int64_t(blockIdx.x) * kBwdTile;
  if (i0 >= sp.len_q) return;
  const float slope = alibi_slope(p, b, h);
  load_rows(q, p.q, p.in_dtype, p.q_layout, b, sp.q_start, i0, sp.len_q, h, d);
  load_rows(dout, bp.dout, p.in_dtype, bp.dout_layout, b, sp.q_start, i0, sp.len_q, h, dv);
  load_row_stats(lse, drow, bp, b, sp, i0, h);
  for (int x = threadIdx.x; x < kBwdTile * d; x += blockDim.x) dq[x] = 0.0f;
  const BwdTiles t{q, dout, k, v, lse, drow, prob, ds};

  for (std::int64_t j0 = 0; j0 < sp.len_k; j0 += kBwdTile) {
    load_rows(k, p.k, p.in_dtype, p.k_layout, b, sp.k_start, j0, sp.len_k, hk, d);
    load_rows(v, p.v, p.in_dtype, p.v_layout, b, sp.k_start, j0, sp.len_k, hk, dv);
    __syncthreads();
    tile_p_and_ds(bp, t, sp, i0, j0, slope);
    __syncthreads();
    for (int x = threadIdx.x; x < kBwdTile * d; x += blockDim.x) {  // dQ += dS K
      const int r = x / d, e = x % d;
      float acc = 0.0f;
      for (int c = 0; c < kBwdTile; ++c) acc += ds[r * kBwdPitch + c] * k[c * d + e];
      dq[x] += acc;
    }
    __syncthreads();
  }
  store_rows(bp.dq, bp.dq_dtype, bp.dq_layout, b, sp.q_start, i0, sp.len_q, h, d, dq);
}

}  // namespace

void launch_bwd_dq(const BwdParams& p, cudaStream_t stream) {
  const int d = p.f.head_dim, dv = p.f.head_dim_v;
  const std::size_t smem = sizeof(float) * std::size_t(4 * kBwdTile * d + 2 * kBwdTile * dv +
                                                       2 * kBwdTile * kBwdPitch + 2 * kBwdTile);
  check_cuda(cudaFuncSetAttribute(bwd_dq, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
             "backward dQ shared memory");
  const dim3 grid(unsigned((p.f.seqlen_q + kBwdTile - 1) / kBwdTile), unsigned(p.f.heads_q),
                  unsigned(p.f.batch));
  if (grid.x == 0) return;
  bwd_dq<<<grid, kBwdThreads, smem, stream>>>(p);
  check_launch("backward dQ kernel");
}

}  // namespace flashkit::cuda
