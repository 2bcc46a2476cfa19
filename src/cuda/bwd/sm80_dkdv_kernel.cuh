// The tensor-core dK/dV kernel (FlashAttention-2's backward loop order): a CTA owns block_n keys
// of one KV head and keeps K, V and the dK, dV accumulators on chip while every query block of
// every query head of the GQA group streams past (so GQA sums dK, dV without atomics). Per query
// block, all on mma.sync:
//   A  S^T = K Q^T, dP^T = V dO^T; P^T = exp2(S^T * scale - lse), dS^T = P^T (dP^T - D) dscore
//      (sm80_bwd_scores.cuh); both written to shared memory as 16-bit tiles;
//   B  dV += P^T dO, dK += dS^T Q;
//   C  (dq_accum set) dQ_partial = dS K, added into the fp32 accumulator with atomics.
// Q, dO, lse and D of the next block are copied while this one computes (two stages); two
// barriers per block: one publishes the copy and proves the other stage is free, one publishes
// P^T and dS^T. dK and dV leave once, staged in shared memory for whole-line stores.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/bwd/bwd_params.hpp"
#include "cuda/bwd/query_block_range.hpp"
#include "cuda/bwd/sm80_bwd_scores.cuh"
#include "cuda/bwd/sm80_bwd_tile_shape.hpp"
#include "cuda/bwd/sm80_warp_gemm.cuh"
#include "cuda/common/cuda_check.hpp"
#include "cuda/ptx/convert.cuh"
#include "cuda/ptx/cp_async.cuh"
#include "cuda/sm80/smem_copy.cuh"
#include "cuda/sm80/staged_tile.cuh"

namespace flashkit::cuda::sm80 {

// Adds a dQ fragment pair into the fp32 accumulator without waiting for an answer: `red` (no
// return value) so a warp never stalls on the L2 round trip of its atomics; one 8-byte vector
// reduction on sm90, two scalar ones before.
__device__ __forceinline__ void add_pair(float* dst, float x0, float x1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(dst), "f"(x0), "f"(x1) : "memory");
#else
  asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(dst), "f"(x0) : "memory");
  asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(dst + 1), "f"(x1) : "memory");
#endif
}

template <class T>
__global__ void __launch_bounds__(T::kThreads, 1)
    dkdv_kernel(const __grid_constant__ BwdParams bp) {
  using Elem = typename T::Elem;
  using QTile = typename T::QTile;
  using KvTile = typename T::KvTile;
  using PTile = typename T::PTile;
  constexpr int kSdpMt = T::kSdpRows / 16, kSdpNt = T::kSdpCols / 8;
  constexpr int kDkvMt = T::kDkvRows / 16, kDkvNt = T::kDkvCols / 8;
  constexpr int kDqMt = T::kDqRows / 16, kDqNt = T::kDqCols / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  const FwdParams& p = bp.f;
  const int b = blockIdx.z, hk = blockIdx.y;
  const core::SeqSpan sp = sequence_span(p, b);
  const int len_q = int(sp.len_q), len_k = int(sp.len_k);
  const int j0 = int(blockIdx.x) * T::kBlockN;
  if (j0 >= len_k) return;
  const int keys = len_k - j0 < T::kBlockN ? len_k - j0 : T::kBlockN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const QueryBlockRange qb = query_block_range(p.mask, j0, j0 + keys - 1, len_q, len_k, T::kBlockM);
  const int blocks = qb.count(), steps = blocks * p.group();

  const std::uint32_t base = ptx::smem_address(smem);
  const std::uint32_t k_tile = base + T::kKOffset, v_tile = base + T::kVOffset;
  const std::uint32_t p_tile = base + T::kPOffset, ds_tile = base + T::kDsOffset;
  auto q_tile = [&](int stage) { return base + T::kQOffset + stage * T::kStageBytes; };
  auto do_tile = [&](int stage) { return q_tile(stage) + QTile::kBytes; };
  auto stats = [&](int stage) {
    return reinterpret_cast<RowStats*>(smem + T::kRowStatsOffset) + stage * T::kBlockM;
  };

  const Elem* k =
      static_cast<const Elem*>(p.k) + core::element_offset(p.k_layout, b, sp.k_start, j0, hk);
  const Elem* v =
      static_cast<const Elem*>(p.v) + core::element_offset(p.v_layout, b, sp.k_start, j0, hk);
  copy_tile_async<KvTile, T::kThreads>(k_tile, k, p.k_layout.token_stride, keys);
  copy_tile_async<KvTile, T::kThreads>(v_tile, v, p.v_layout.token_stride, keys);

  // Step s visits query head hk * group + s / blocks and query block qb.first + (s + rot) %
  // blocks, walked by a cursor (no integer division in the loop: two of them cost ~60
  // instructions a step). The rotation by key block spreads the CTAs of one head over different
  // dQ rows at any moment: without it all of them start at the same query block and their
  // atomics queue on the same L2 lines.
  const int rot = blocks > 0 ? int(blockIdx.x) % blocks : 0;
  struct Cursor {
    int head, block;
  };
  auto advance = [&](Cursor c) {
    if (++c.block == qb.first + blocks) c.block = qb.first;
    if (c.block == qb.first + rot) ++c.head;
    return c;
  };
  auto issue = [&](Cursor c, int stage) {
    const int h = c.head, row0 = c.block * T::kBlockM;
    const int rows = len_q - row0 < T::kBlockM ? len_q - row0 : T::kBlockM;
    const Elem* q =
        static_cast<const Elem*>(p.q) + core::element_offset(p.q_layout, b, sp.q_start, row0, h);
    const Elem* dout = static_cast<const Elem*>(bp.dout) +
                       core::element_offset(bp.dout_layout, b, sp.q_start, row0, h);
    copy_tile_async<QTile, T::kThreads>(q_tile(stage), q, p.q_layout.token_stride, rows);
    copy_tile_async<QTile, T::kThreads>(do_tile(stage), dout, bp.dout_layout.token_stride, rows);
    if (int(threadIdx.x) < T::kBlockM) {
      stats(stage)[threadIdx.x] = row_stats(bp, b, sp, row0 + int(threadIdx.x), h);
    }
  };
  Cursor cur{hk * p.group(), qb.first + rot};
  Cursor next = steps > 1 ? advance(cur) : cur;
  if (steps > 0) issue(cur, 0);
  ptx::cp_async_commit();

  float dk[kDkvMt][kDkvNt][4], dv[kDkvMt][kDkvNt][4];
  zero(dk);
  zero(dv);
  // Warp coordinates in the three GEMM outputs.
  const int sdp_key0 = warp / T::kShape.sdp.cols * T::kSdpRows;
  const int sdp_q0 = warp % T::kShape.sdp.cols * T::kSdpCols;
  const int dkv_key0 = warp / T::kShape.dkv.cols * T::kDkvRows;
  const int dkv_d0 = warp % T::kShape.dkv.cols * T::kDkvCols;
  const int dq_q0 = warp / T::kShape.dq.cols * T::kDqRows;
  const int dq_d0 = warp % T::kShape.dq.cols * T::kDqCols;
  // This lane's first dQ accumulator float for query head 0 and query block 0 (bwd_params.hpp).
  float* const dq_lane = bp.dq_accum == nullptr
                             ? nullptr
                             : bp.dq_accum + (dq_accum_first_row(bp, b, sp) + dq_q0) * T::kD +
                                   dq_d0 * 8 + g * 8 + 2 * t;
  // Per-lane operand offsets (sm80_warp_gemm.cuh).
  const int kv_a_lane = operand_lane<KvTile, true, Stored::k_contiguous>(lane);
  const int q_nk_lane = operand_lane<QTile, false, Stored::k_contiguous>(lane);
  const int q_kn_lane = operand_lane<QTile, false, Stored::k_rows>(lane);
  const int p_a_lane = operand_lane<PTile, true, Stored::k_contiguous>(lane);
  const int p_km_lane = operand_lane<PTile, true, Stored::k_rows>(lane);
  const int kv_kn_lane = operand_lane<KvTile, false, Stored::k_rows>(lane);

  BwdScoreContext ctx;
  ctx.col0 = j0;
  ctx.shift = core::diagonal_shift(p.mask, len_q, len_k);
  ctx.len_k = len_k;
  ctx.mods = p.has_score_mods();
  for (int s = 0; s < steps; ++s) {
    const int stage = s % T::kStages, h = cur.head, row0 = cur.block * T::kBlockM;
    ptx::cp_async_wait<0>();
    __syncthreads();  // step s's Q, dO, stats visible; every warp is past step s - 1
    if (s + 1 < steps) issue(next, (s + 1) % T::kStages);
    ptx::cp_async_commit();

    // A: S^T and dP^T, then P^T and dS^T into shared memory.
    {
      float st[kSdpMt][kSdpNt][4], dpt[kSdpMt][kSdpNt][4];
      zero(st);
      zero(dpt);
      warp_gemm<Elem, kSdpMt, kSdpNt, T::kD, KvTile, Stored::k_contiguous, QTile,
                Stored::k_contiguous, typename T::Gemm>(st, k_tile, kv_a_lane, sdp_key0,
                                                        q_tile(stage), q_nk_lane, sdp_q0);
      warp_gemm<Elem, kSdpMt, kSdpNt, T::kD, KvTile, Stored::k_contiguous, QTile,
                Stored::k_contiguous, typename T::Gemm>(dpt, v_tile, kv_a_lane, sdp_key0,
                                                        do_tile(stage), q_nk_lane, sdp_q0);
      ctx.row0 = row0;
      ctx.slope = alibi_slope(p, b, h);
      ctx.masked = keys < T::kBlockN || qb.needs_mask(cur.block);  // keys past the end, or an edge
      const RowStats* row_st = stats(stage);
      // Plain scores take 4 instructions an element, plus the band test and a select on a block
      // that crosses a mask edge; the general path (softcap, ALiBi) costs ~17 with its
      // per-element branches. One uniform branch picks the variant.
      auto plain_scores = [&](auto masked_tag) {
        constexpr bool kMasked = decltype(masked_tag)::value;
        BlockBand bb{0, 0, 0, 0};  // per block pair, only where a mask edge runs through it
        if constexpr (kMasked) bb = block_band(p, ctx);
#pragma unroll
        for (int nt = 0; nt < kSdpNt; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int q = sdp_q0 + nt * 8 + 2 * t + e;  // this element's query (a column of S^T)
            const PlainRow row = plain_row(p, row_st[q]);
            RowBand band{0, 0, 0};
            if constexpr (kMasked) band = row_band(bb, q);
#pragma unroll
            for (int mt = 0; mt < kSdpMt; ++mt)
#pragma unroll
              for (int half = 0; half < 2; ++half) {
                plain_element<kMasked>(st[mt][nt][2 * half + e], dpt[mt][nt][2 * half + e], p, row,
                                       band, sdp_key0 + mt * 16 + half * 8 + g);
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
        for (int nt = 0; nt < kSdpNt; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int q = sdp_q0 + nt * 8 + 2 * t + e;  // this element's query (a column of S^T)
            const RowStats rs = row_st[q];
            RowBand band{0, 0, 0};
            if (ctx.masked) band = row_band(bb, q);
#pragma unroll
            for (int mt = 0; mt < kSdpMt; ++mt)
#pragma unroll
              for (int half = 0; half < 2; ++half) {
                const int key = sdp_key0 + mt * 16 + half * 8 + g;
                const bool visible = !ctx.masked || band_sees(band, key);
                prob_and_dscore(st[mt][nt][2 * half + e], dpt[mt][nt][2 * half + e], p, ctx, rs, q,
                                key, visible);
              }
          }
      }
      // The warp's kSdpNt units of each row are one run (ptx/swizzle.hpp, run_base): one
      // register, an XOR per unit, the rows as immediates, where the shape spends registers on
      // addresses (T::Gemm). 4-unit strips (block_m 32) keep the address per store.
      constexpr bool kRuns = T::Gemm::kOperandBases && PTile::kStripUnits == 8 && 8 % kSdpNt == 0;
      const int run = kRuns ? PTile::run_base(sdp_key0, sdp_q0 / 8, g, 4 * t) : 0;
#pragma unroll
      for (int mt = 0; mt < kSdpMt; ++mt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int row_off = PTile::lane_offset(half * 8 + g);
#pragma unroll
          for (int nt = 0; nt < kSdpNt; ++nt) {
            const int unit = (sdp_q0 + nt * 8) / 8;
            const int off =
                kRuns ? (run ^ (16 * nt)) + mt * PTile::kRows16Bytes + half * PTile::kRows8Bytes
                      : PTile::fixed_offset(sdp_key0 + 16 * mt, unit) +
                            (row_off ^ PTile::unit_xor(unit)) + 4 * t;
            *reinterpret_cast<std::uint32_t*>(smem + T::kPOffset + off) =
                ptx::pack2<Elem>(st[mt][nt][2 * half], st[mt][nt][2 * half + 1]);
            *reinterpret_cast<std::uint32_t*>(smem + T::kDsOffset + off) =
                ptx::pack2<Elem>(dpt[mt][nt][2 * half], dpt[mt][nt][2 * half + 1]);
          }
        }
    }
    __syncthreads();  // P^T and dS^T visible

    // B: dV += P^T dO, dK += dS^T Q.
    warp_gemm<Elem, kDkvMt, kDkvNt, T::kBlockM, PTile, Stored::k_contiguous, QTile, Stored::k_rows,
              typename T::Gemm>(dv, p_tile, p_a_lane, dkv_key0, do_tile(stage), q_kn_lane, dkv_d0);
    warp_gemm<Elem, kDkvMt, kDkvNt, T::kBlockM, PTile, Stored::k_contiguous, QTile, Stored::k_rows,
              typename T::Gemm>(dk, ds_tile, p_a_lane, dkv_key0, q_tile(stage), q_kn_lane, dkv_d0);

    // C: dQ += dS K (dS read as the transpose of the stored dS^T).
    if (bp.dq_accum != nullptr) {
      float dq[kDqMt][kDqNt][4];
      zero(dq);
      warp_gemm<Elem, kDqMt, kDqNt, T::kBlockN, PTile, Stored::k_rows, KvTile, Stored::k_rows,
                typename T::Gemm>(dq, ds_tile, p_km_lane, dq_q0, k_tile, kv_kn_lane, dq_d0);
      // The warp's rows start on a group of 8, so each fragment half is 256 contiguous bytes at
      // an immediate offset from one base a step.
      float* const dq_step = dq_lane + (h * dq_accum_rows(bp) + row0) * T::kD;
#pragma unroll
      for (int mt = 0; mt < kDqMt; ++mt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          if (row0 + dq_q0 + mt * 16 + half * 8 + g >= len_q) continue;
          float* dst = dq_step + (mt * 16 + half * 8) * T::kD;
#pragma unroll
          for (int nt = 0; nt < kDqNt; ++nt) {
            add_pair(dst + nt * 64, dq[mt][nt][2 * half], dq[mt][nt][2 * half + 1]);
          }
        }
    }
    cur = next;
    next = advance(next);
  }
  ptx::cp_async_wait<0>();  // no copy outlives the CTA (steps == 0 leaves K and V in flight)
  // dK and dV out through shared memory (K, V and what follows them, read for the last time
  // above). From registers a quad writes 16 bytes of each of 8 rows, so one warp store touches 8
  // L2 lines: 4096 line accesses a CTA at d = 128 in bf16, against 512 this way (4 whole lines a
  // store), which weighs on CTAs of a few steps (short or causal sequences).
  __syncthreads();
  const auto stage = [&](unsigned char* region, const float(&acc)[kDkvMt][kDkvNt][4], DType dtype) {
    if (dtype == DType::f32) {
      stage_fragments<float, T::kBlockN, T::kD>(region, acc, dkv_key0, dkv_d0, g, t);
    } else if (dtype == DType::f16) {
      stage_fragments<__half, T::kBlockN, T::kD>(region, acc, dkv_key0, dkv_d0, g, t);
    } else {
      stage_fragments<__nv_bfloat16, T::kBlockN, T::kD>(region, acc, dkv_key0, dkv_d0, g, t);
    }
  };
  const auto store = [&](const unsigned char* region, void* out, const core::TokenLayout& lay,
                         DType dtype) {
    const std::int64_t off = core::element_offset(lay, b, sp.k_start, j0, hk);
    if (dtype == DType::f32) {
      store_tile<StagedTile<float, T::kBlockN, T::kD>, T::kThreads>(
          region, static_cast<float*>(out) + off, lay.token_stride, keys);
    } else if (dtype == DType::f16) {
      store_tile<StagedTile<__half, T::kBlockN, T::kD>, T::kThreads>(
          region, static_cast<__half*>(out) + off, lay.token_stride, keys);
    } else {
      store_tile<StagedTile<__nv_bfloat16, T::kBlockN, T::kD>, T::kThreads>(
          region, static_cast<__nv_bfloat16*>(out) + off, lay.token_stride, keys);
    }
  };
  // Each region holds an f32 tile (two 16-bit K / V tiles' bytes).
  unsigned char* const dk_region = smem + T::kKOffset;
  unsigned char* const dv_region = smem + T::kKOffset + 2 * KvTile::kBytes;
  stage(dk_region, dk, bp.dk_dtype);
  stage(dv_region, dv, bp.dv_dtype);
  __syncthreads();
  store(dk_region, bp.dk, bp.dk_layout, bp.dk_dtype);
  store(dv_region, bp.dv, bp.dv_layout, bp.dv_dtype);
}

template <class T>
void launch_dkdv(const BwdParams& p, cudaStream_t stream) {
  const dim3 grid(unsigned((p.f.seqlen_k + T::kBlockN - 1) / T::kBlockN), unsigned(p.f.heads_kv),
                  unsigned(p.f.batch));
  if (grid.x == 0 || grid.z == 0) return;
  check_cuda(cudaFuncSetAttribute(dkdv_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  T::kSmemBytes),
             "sm80 backward dK/dV: shared memory limit");
  dkdv_kernel<T><<<grid, T::kThreads, T::kSmemBytes, stream>>>(p);
  check_launch("sm80 backward dK/dV kernel");
}

}  // namespace flashkit::cuda::sm80
