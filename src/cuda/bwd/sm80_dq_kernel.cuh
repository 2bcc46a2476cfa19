// The deterministic dQ kernel (`deterministic = true`): dQ without atomics, so every run is
// bit-identical. A CTA owns block_m queries of one head, one m16 tile per warp, and walks the KV
// blocks it can see (sm80/kv_block_range.hpp, from the last down); per block, on mma.sync:
//   S = Q K^T, dP = dO V^T; P = exp2(S * scale - lse), dS = P (dP - D) dscore in registers;
//   dQ += dS K with dS straight from the accumulator registers (their layout is mma's A layout).
// It recomputes S and dP, which the dK/dV kernel also computes: 7 GEMMs of block size instead
// of 5, the price of a fixed summation order. K and V are double-buffered, one barrier a block.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/bwd/bwd_params.hpp"
#include "cuda/bwd/sm80_bwd_scores.cuh"
#include "cuda/bwd/sm80_bwd_tile_shape.hpp"
#include "cuda/bwd/sm80_warp_gemm.cuh"
#include "cuda/common/cuda_check.hpp"
#include "cuda/ptx/convert.cuh"
#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/mma.cuh"
#include "cuda/sm80/kv_block_range.hpp"
#include "cuda/sm80/smem_copy.cuh"

namespace flashkit::cuda::sm80 {

template <class T>
__global__ void __launch_bounds__(T::kThreads, 1) dq_kernel(const __grid_constant__ BwdParams bp) {
  using Elem = typename T::Elem;
  using QTile = typename T::QTile;
  using KvTile = typename T::KvTile;
  constexpr int kNt = T::kBlockN / 8, kDt = T::kD / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  const FwdParams& p = bp.f;
  const int b = blockIdx.z, h = blockIdx.y, hk = h / p.group();
  const core::SeqSpan sp = sequence_span(p, b);
  const int len_q = int(sp.len_q), len_k = int(sp.len_k);
  const int row0 = int(gridDim.x - 1 - blockIdx.x) * T::kBlockM;  // long causal rows first
  if (row0 >= len_q) return;
  const int rows = len_q - row0 < T::kBlockM ? len_q - row0 : T::kBlockM;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;

  const std::uint32_t q_tile = ptx::smem_address(smem), do_tile = q_tile + QTile::kBytes;
  auto k_tile = [&](int stage) { return do_tile + QTile::kBytes + stage * 2 * KvTile::kBytes; };
  auto v_tile = [&](int stage) { return k_tile(stage) + KvTile::kBytes; };
  const Elem* q =
      static_cast<const Elem*>(p.q) + core::element_offset(p.q_layout, b, sp.q_start, row0, h);
  const Elem* dout = static_cast<const Elem*>(bp.dout) +
                     core::element_offset(bp.dout_layout, b, sp.q_start, row0, h);
  const Elem* k =
      static_cast<const Elem*>(p.k) + core::element_offset(p.k_layout, b, sp.k_start, 0, hk);
  const Elem* v =
      static_cast<const Elem*>(p.v) + core::element_offset(p.v_layout, b, sp.k_start, 0, hk);
  const std::int64_t k_stride = p.k_layout.token_stride, v_stride = p.v_layout.token_stride;
  auto issue_kv = [&](int n, int stage) {
    const int keys = len_k - n * T::kBlockN;
    copy_tile_async<KvTile, T::kThreads>(k_tile(stage), k + n * T::kBlockN * k_stride, k_stride,
                                         keys);
    copy_tile_async<KvTile, T::kThreads>(v_tile(stage), v + n * T::kBlockN * v_stride, v_stride,
                                         keys);
  };

  const KvBlockRange range =
      kv_block_range(p.mask, row0, row0 + rows - 1, len_q, len_k, T::kBlockN);
  int n = range.first();
  copy_tile_async<QTile, T::kThreads>(q_tile, q, p.q_layout.token_stride, rows);
  copy_tile_async<QTile, T::kThreads>(do_tile, dout, bp.dout_layout.token_stride, rows);
  if (n >= 0) issue_kv(n, 0);
  ptx::cp_async_commit();

  // This thread's rows: warp * 16 + g and + 8.
  const RowStats st[2] = {row_stats(bp, b, sp, row0 + warp * 16 + g, h),
                          row_stats(bp, b, sp, row0 + warp * 16 + 8 + g, h)};
  const PlainRow plain[2] = {plain_row(p, st[0]), plain_row(p, st[1])};
  BwdScoreContext ctx;
  ctx.row0 = row0;
  ctx.shift = core::diagonal_shift(p.mask, len_q, len_k);
  ctx.len_k = len_k;
  ctx.slope = alibi_slope(p, b, h);
  ctx.mods = p.has_score_mods();
  const int q_a_lane = operand_lane<QTile, true, Stored::k_contiguous>(lane);
  const int kv_nk_lane = operand_lane<KvTile, false, Stored::k_contiguous>(lane);
  const int kv_kn_lane = operand_lane<KvTile, false, Stored::k_rows>(lane);

  float dq[1][kDt][4];
  zero(dq);
  int stage = 0;
  while (n >= 0) {
    const int next = range.next(n);
    ptx::cp_async_wait<0>();
    __syncthreads();  // K_n, V_n (and Q, dO) visible; every warp is done with the other stage
    if (next >= 0) issue_kv(next, stage ^ 1);
    ptx::cp_async_commit();

    float s[1][kNt][4], dp[1][kNt][4];
    zero(s);
    zero(dp);
    warp_gemm<Elem, 1, kNt, T::kD, QTile, Stored::k_contiguous, KvTile, Stored::k_contiguous,
              typename T::Gemm>(s, q_tile, q_a_lane, warp * 16, k_tile(stage), kv_nk_lane, 0);
    warp_gemm<Elem, 1, kNt, T::kD, QTile, Stored::k_contiguous, KvTile, Stored::k_contiguous,
              typename T::Gemm>(dp, do_tile, q_a_lane, warp * 16, v_tile(stage), kv_nk_lane, 0);
    ctx.col0 = std::int64_t(n) * T::kBlockN;
    ctx.masked = range.needs_mask(n);
    // The variants of sm80_dkdv_kernel.cuh: plain, plain with the band test, general.
    auto plain_scores = [&](auto masked_tag) {
      constexpr bool kMasked = decltype(masked_tag)::value;
      BlockBand bb{0, 0, 0, 0};  // per block pair, only where a mask edge runs through it
      if constexpr (kMasked) bb = block_band(p, ctx);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        RowBand band{0, 0, 0};
        if constexpr (kMasked) band = row_band(bb, warp * 16 + half * 8 + g);
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            plain_element<kMasked>(s[0][nt][2 * half + e], dp[0][nt][2 * half + e], p, plain[half],
                                   band, nt * 8 + 2 * t + e);
          }
      }
    };
    if (!ctx.mods && !ctx.masked) {
      plain_scores(std::false_type{});
    } else if (!ctx.mods) {
      plain_scores(std::true_type{});
    } else {
      const BlockBand bb = ctx.masked ? block_band(p, ctx) : BlockBand{0, 0, 0, 0};
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = warp * 16 + half * 8 + g;
        RowBand band{0, 0, 0};
        if (ctx.masked) band = row_band(bb, row);
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int col = nt * 8 + 2 * t + e;
            const bool visible = !ctx.masked || band_sees(band, col);
            prob_and_dscore(s[0][nt][2 * half + e], dp[0][nt][2 * half + e], p, ctx, st[half], row,
                            col, visible);
          }
      }
    }

    // dQ += dS K: dS of n8 tiles 2kk, 2kk + 1 is the A fragment of k16 step kk.
#pragma unroll
    for (int kk = 0; kk < T::kBlockN / 16; ++kk) {
      std::uint32_t a[4];
      a[0] = ptx::pack2<Elem>(dp[0][2 * kk][0], dp[0][2 * kk][1]);
      a[1] = ptx::pack2<Elem>(dp[0][2 * kk][2], dp[0][2 * kk][3]);
      a[2] = ptx::pack2<Elem>(dp[0][2 * kk + 1][0], dp[0][2 * kk + 1][1]);
      a[3] = ptx::pack2<Elem>(dp[0][2 * kk + 1][2], dp[0][2 * kk + 1][3]);
#pragma unroll
      for (int dn = 0; dn < T::kD / 16; ++dn) {
        std::uint32_t bf[4];
        load_frag<Stored::k_rows>(
            bf, frag_at<KvTile, Stored::k_rows>(k_tile(stage), kv_kn_lane, dn * 16, kk * 16));
        ptx::mma_m16n8k16<Elem>(dq[0][2 * dn], a, bf[0], bf[1]);
        ptx::mma_m16n8k16<Elem>(dq[0][2 * dn + 1], a, bf[2], bf[3]);
      }
    }
    stage ^= 1;
    n = next;
  }
  ptx::cp_async_wait<0>();

#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int i = row0 + warp * 16 + half * 8 + g;
    if (i >= len_q) continue;
    const std::int64_t off = core::element_offset(bp.dq_layout, b, sp.q_start, i, h) + 2 * t;
#pragma unroll
    for (int dn = 0; dn < kDt; ++dn) {
      store_pair(bp.dq, bp.dq_dtype, off + dn * 8, dq[0][dn][2 * half], dq[0][dn][2 * half + 1]);
    }
  }
}

template <class T>
void launch_dq(const BwdParams& p, cudaStream_t stream) {
  const dim3 grid(unsigned((p.f.seqlen_q + T::kBlockM - 1) / T::kBlockM), unsigned(p.f.heads_q),
                  unsigned(p.f.batch));
  if (grid.x == 0 || grid.z == 0) return;
  check_cuda(cudaFuncSetAttribute(dq_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  T::kSmemBytes),
             "sm80 backward dQ: shared memory limit");
  dq_kernel<T><<<grid, T::kThreads, T::kSmemBytes, stream>>>(p);
  check_launch("sm80 backward dQ kernel");
}

}  // namespace flashkit::cuda::sm80
