// dK and dV: one CTA per (sequence, KV head, 16-key block). The keys' K, V and their gradient
// accumulators stay in shared memory while every query block of every query head of the GQA
// group streams past (FA2's loop order), so dK and dV are written once, summed over the group
// without atomics.
#include <cstdint>

#include "cuda/bwd/bwd_kernels.hpp"
#include "cuda/bwd/bwd_tile.cuh"
#include "cuda/common/cuda_check.hpp"

namespace flashkit::cuda {

namespace {

__global__ void __launch_bounds__(kBwdThreads) bwd_dkdv(BwdParams bp) {
  extern __shared__ float smem[];
  const FwdParams& p = bp.f;
  const int d = p.head_dim, dv = p.head_dim_v;
  float* k = smem;
  float* v = k + kBwdTile * d;
  float* dk = v + kBwdTile * dv;
  float* dvacc = dk + kBwdTile * d;
  float* q = dvacc + kBwdTile * dv;
  float* dout = q + kBwdTile * d;
  float* prob = dout + kBwdTile * dv;
  float* ds = prob + kBwdTile * kBwdPitch;
  float* lse = ds + kBwdTile * kBwdPitch;
  float* drow = lse + kBwdTile;

  const int b = blockIdx.z, hk = blockIdx.y;
  const core::SeqSpan sp = sequence_span(p, b);
  const std::int64_t j0 = std::int64_t(blockIdx.x) * kBwdTile;
  if (j0 >= sp.len_k) return;
  load_rows(k, p.k, p.in_dtype, p.k_layout, b, sp.k_start, j0, sp.len_k, hk, d);
  load_rows(v, p.v, p.in_dtype, p.v_layout, b, sp.k_start, j0, sp.len_k, hk, dv);
  for (int x = threadIdx.x; x < kBwdTile * d; x += blockDim.x) dk[x] = 0.0f;
  for (int x = threadIdx.x; x < kBwdTile * dv; x += blockDim.x) dvacc[x] = 0.0f;
  const BwdTiles t{q, dout, k, v, lse, drow, prob, ds};

  for (int h = hk * p.group(); h < (hk + 1) * p.group(); ++h) {
    const float slope = alibi_slope(p, b, h);
    for (std::int64_t i0 = 0; i0 < sp.len_q; i0 += kBwdTile) {
      load_rows(q, p.q, p.in_dtype, p.q_layout, b, sp.q_start, i0, sp.len_q, h, d);
      load_rows(dout, bp.dout, p.in_dtype, bp.dout_layout, b, sp.q_start, i0, sp.len_q, h, dv);
      load_row_stats(lse, drow, bp, b, sp, i0, h);
      __syncthreads();
      tile_p_and_ds(bp, t, sp, i0, j0, slope);
      __syncthreads();
      for (int x = threadIdx.x; x < kBwdTile * dv; x += blockDim.x) {  // dV += P^T dO
        const int c = x / dv, e = x % dv;
        float acc = 0.0f;
        for (int r = 0; r < kBwdTile; ++r) acc += prob[r * kBwdPitch + c] * dout[r * dv + e];
        dvacc[x] += acc;
      }
      for (int x = threadIdx.x; x < kBwdTile * d; x += blockDim.x) {  // dK += dS^T Q
        const int c = x / d, e = x % d;
        float acc = 0.0f;
        for (int r = 0; r < kBwdTile; ++r) acc += ds[r * kBwdPitch + c] * q[r * d + e];
        dk[x] += acc;
      }
      __syncthreads();
    }
  }
  store_rows(bp.dk, bp.dk_dtype, bp.dk_layout, b, sp.k_start, j0, sp.len_k, hk, d, dk);
  store_rows(bp.dv, bp.dv_dtype, bp.dv_layout, b, sp.k_start, j0, sp.len_k, hk, dv, dvacc);
}

}  // namespace

void launch_bwd_dkdv(const BwdParams& p, cudaStream_t stream) {
  const int d = p.f.head_dim, dv = p.f.head_dim_v;
  const std::size_t smem = sizeof(float) * std::size_t(3 * kBwdTile * d + 3 * kBwdTile * dv +
                                                       2 * kBwdTile * kBwdPitch + 2 * kBwdTile);
  check_cuda(cudaFuncSetAttribute(bwd_dkdv, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
             "backward dK/dV shared memory");
  const dim3 grid(unsigned((p.f.seqlen_k + kBwdTile - 1) / kBwdTile), unsigned(p.f.heads_kv),
                  unsigned(p.f.batch));
  if (grid.x == 0) return;
  bwd_dkdv<<<grid, kBwdThreads, smem, stream>>>(p);
  check_launch("backward dK/dV kernel");
}

}  // namespace flashkit::cuda
