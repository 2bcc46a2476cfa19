// The sm80 forward mainloop: one CTA, one query tile, KV blocks from the last visible one down.
//
// Shared memory holds Q, one K block and one V block. The copies overlap the math the way FA2
// schedules them: V of block n lands while S = Q K_n^T and the softmax run, K of the next block
// lands while O += P V_n runs. Each barrier both publishes the copy that was waited for and
// proves every warp is done reading the buffer the next copy overwrites.
#pragma once

#include <cstdint>

#include "cuda/common/fwd_params.hpp"
#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/mma.cuh"
#include "cuda/sm80/fwd_softmax.cuh"
#include "cuda/sm80/fwd_tile_scheduler.cuh"
#include "cuda/sm80/kv_block_range.hpp"
#include "cuda/sm80/smem_copy.cuh"
#include "cuda/sm80/warp_fragments.cuh"

namespace flashkit::cuda::sm80 {

// S = Q K^T for one block: per k16 step, each warp's Q fragments once, then K fragments two n8
// tiles at a time. Fragments are loaded T::kFragsAhead uses ahead (a ring of register buffers),
// so an ldmatrix runs under earlier mma instead of in front of its own: with one buffer every mma
// waited on the load just before it (ncu: short-scoreboard stalls on the first mma after each
// load were 16% of the forward's samples at d = 128, FA2's pipelined loop 7%).
// after_first_step() runs once the first k16 step's mma are issued.
template <class T, class AfterFirstStep>
__device__ __forceinline__ void gemm_qk(ScoreBlock<T>& s, std::uint32_t q_tile,
                                        std::uint32_t k_tile, int warp, int q_lane, int k_lane,
                                        const AfterFirstStep& after_first_step) {
  using Elem = typename T::Elem;
  constexpr int kSteps = T::kD / 16, kPairs = T::kBlockN / 16, kFrags = kSteps * kPairs;
  constexpr int kAhead = T::kFragsAhead;
  // Q of step kk + 1 is loaded kAhead fragments before the step starts, into the buffer step
  // kk - 1 used: two Q buffers hold while kAhead <= kPairs.
  static_assert(kAhead >= 1 && kAhead <= kPairs, "Q fragments are double-buffered");
#pragma unroll
  for (int mt = 0; mt < T::kMmaM; ++mt)
#pragma unroll
    for (int nt = 0; nt < T::kBlockN / 8; ++nt)
#pragma unroll
      for (int idx = 0; idx < 4; ++idx) s[mt][nt][idx] = 0.0f;
  std::uint32_t a[2][T::kMmaM][4], b[kAhead + 1][4];
  // Fragment f: K's (k step f / kPairs, n pair f % kPairs), after the step's Q where f starts it.
  auto load = [&](int f) {
    const int kk = f / kPairs;
    if (f % kPairs == 0) {
#pragma unroll
      for (int mt = 0; mt < T::kMmaM; ++mt) {
        load_a<typename T::QTile>(a[kk % 2][mt], q_tile, q_lane, warp * T::kRowsPerWarp + mt * 16,
                                  kk * 16);
      }
    }
    load_b_from_nk<typename T::KvTile>(b[f % (kAhead + 1)], k_tile, k_lane, (f % kPairs) * 16,
                                       kk * 16);
  };
#pragma unroll
  for (int f = 0; f < kAhead; ++f) load(f);
#pragma unroll
  for (int f = 0; f < kFrags; ++f) {
    if (f + kAhead < kFrags) load(f + kAhead);
    const int kk = f / kPairs, np = f % kPairs;
    const std::uint32_t(&bf)[4] = b[f % (kAhead + 1)];
#pragma unroll
    for (int mt = 0; mt < T::kMmaM; ++mt) {
      ptx::mma_m16n8k16<Elem>(s[mt][2 * np], a[kk % 2][mt], bf[0], bf[1]);
      ptx::mma_m16n8k16<Elem>(s[mt][2 * np + 1], a[kk % 2][mt], bf[2], bf[3]);
    }
    if (f == kPairs - 1) after_first_step();
  }
}

// O += P V for one block, P straight from the score registers; V fragments T::kFragsAhead uses
// ahead as in gemm_qk.
template <class T>
__device__ __forceinline__ void gemm_pv(FwdAccum<T>& acc, const ScoreBlock<T>& s,
                                        std::uint32_t v_tile, int v_lane) {
  using Elem = typename T::Elem;
  constexpr int kSteps = T::kBlockN / 16, kPairs = T::kD / 16, kFrags = kSteps * kPairs;
  constexpr int kAhead = T::kFragsAhead;
  std::uint32_t b[kAhead + 1][4];
  auto load_v = [&](int f) {
    load_b_from_kn<typename T::KvTile>(b[f % (kAhead + 1)], v_tile, v_lane, (f / kPairs) * 16,
                                       (f % kPairs) * 16);
  };
#pragma unroll
  for (int f = 0; f < kAhead; ++f) load_v(f);
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk) {
    std::uint32_t a[T::kMmaM][4];
#pragma unroll
    for (int mt = 0; mt < T::kMmaM; ++mt) probs_as_a<T>(a[mt], s, mt, kk);
#pragma unroll
    for (int dn = 0; dn < kPairs; ++dn) {
      const int f = kk * kPairs + dn;
      if (f + kAhead < kFrags) load_v(f + kAhead);
      const std::uint32_t(&bf)[4] = b[f % (kAhead + 1)];
#pragma unroll
      for (int mt = 0; mt < T::kMmaM; ++mt) {
        ptx::mma_m16n8k16<Elem>(acc.o[mt][2 * dn], a[mt], bf[0], bf[1]);
        ptx::mma_m16n8k16<Elem>(acc.o[mt][2 * dn + 1], a[mt], bf[2], bf[3]);
      }
    }
  }
}

// Source: where K and V rows come from (kv_source.cuh: contiguous tensors or cache pages).
// kScoreMods false: a kernel for calls without softcap or ALiBi (FwdParams::has_score_mods), whose
// loop holds no element-wise score code: at d = 256 (bf16, sm_90a) 1363 instructions against
// 2933, and a fast path 14 shorter (docs/kernels/sm80_fwd.md, v16).
template <class T, bool kScoreMods, class Source>
__device__ __forceinline__ void fwd_mainloop(const FwdParams& p, const FwdTile& tile,
                                             const Source& source, const KvBlockRange& range,
                                             unsigned char* smem, FwdAccum<T>& acc) {
  using Elem = typename T::Elem;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const std::uint32_t q_tile = ptx::smem_address(smem);
  const std::uint32_t k_tile = q_tile + T::QTile::kBytes;
  const std::uint32_t v_tile = k_tile + T::KvTile::kBytes;
  const int q_lane = rows_major_lane<typename T::QTile>(lane);
  const int k_lane = rows_minor_lane<typename T::KvTile>(lane);
  const int v_lane = rows_major_lane<typename T::KvTile>(lane);
  const Elem* q =
      static_cast<const Elem*>(p.q) +
      core::element_offset(p.q_layout, tile.batch, tile.span.q_start, tile.row_begin, tile.head);
  const auto& kv = source.template open<Elem>(p, tile);
  const int len_k = int(tile.span.len_k);
  auto keys_left = [&](int n) { return len_k - n * T::kBlockN; };

  ScoreContext ctx;
  ctx.row0 = tile.row_begin;
  ctx.shift = core::diagonal_shift(p.mask, tile.span.len_q, tile.span.len_k);
  ctx.len_k = len_k;
  ctx.slope = alibi_slope(p, tile.batch, tile.head);
  ctx.mods = kScoreMods && p.has_score_mods();

  int n = range.first();
  kv.template copy_q<typename T::QTile, T::kThreads, T::kCopySharedBase>(q_tile, p, tile, q);
  kv.template copy_k<typename T::KvTile, T::kThreads, T::kCopySharedBase>(k_tile, n * T::kBlockN,
                                                                          keys_left(n));
  ptx::cp_async_commit();
  while (n >= 0) {
    const int next = range.next(n);
    ptx::cp_async_wait<0>();
    __syncthreads();  // K_n (and Q) visible; every warp is past P V of the previous block
    auto copy_v = [&] {
      kv.template copy_v<typename T::KvTile, T::kThreads, T::kCopySharedBase>(
          v_tile, n * T::kBlockN, keys_left(n));
      ptx::cp_async_commit();
    };
    ScoreBlock<T> s;
    if constexpr (T::kVCopyInQk) {
      gemm_qk<T>(s, q_tile, k_tile, warp, q_lane, k_lane, copy_v);
    } else {
      copy_v();
      gemm_qk<T>(s, q_tile, k_tile, warp, q_lane, k_lane, [] {});
    }
    ctx.col0 = std::int64_t(n) * T::kBlockN;
    const float factor = scores_to_base2<T>(s, p, ctx, warp, lane);
    if (range.needs_mask(n)) apply_mask<T>(s, p, ctx, warp, lane);
    if constexpr (!T::kSoftmaxAfterCopy) online_softmax<T>(s, acc, factor);

    ptx::cp_async_wait<0>();
    __syncthreads();  // V_n visible; every warp is done reading K_n
    if (next >= 0) {
      kv.template copy_k<typename T::KvTile, T::kThreads, T::kCopySharedBase>(
          k_tile, next * T::kBlockN, keys_left(next));
      ptx::cp_async_commit();
    }
    if constexpr (T::kSoftmaxAfterCopy) online_softmax<T>(s, acc, factor);
    gemm_pv<T>(acc, s, v_tile, v_lane);
    n = next;
  }
}

}  // namespace flashkit::cuda::sm80
