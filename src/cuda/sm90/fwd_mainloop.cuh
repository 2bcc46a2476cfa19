// A consumer warpgroup of the sm90 forward: its 64 query rows against every visited KV block.
//
// The softmax runs on the accumulator registers with the sm80 forward's code (wgmma's m64
// accumulator is mma.sync's m16n8 layout once per warp). Two overlaps hide it behind the tensor
// cores:
//  - inside the warpgroup, block i + 1's S = Q K^T and block i's O += P V are issued together;
//    the softmax of block i + 1 runs as soon as S is done, while P V still runs. O is rescaled
//    by block i + 1's max after that P V's wait, or with T::kRescaleUnderS one step later,
//    between the issue of block i + 2's S and of block i + 1's P V (softmax_update / rescale_o);
//  - between the consumer warpgroups (pingpong), each issues its GEMMs only after the one before
//    it in the ring has issued its own (FwdNamedBarrier::schedule + c), so one warpgroup's softmax
//    overlaps another's GEMMs.
// Consumer 0 goes first: the last consumer opens its barrier once before the loop. All run the
// same blocks, so over L loop steps each barrier sees L syncs and L arrivals (the last consumer
// skips its arrival after its last step): every tile leaves the barriers as it found them. Where
// T::kPingpong is off (one consumer, and d = 128 in 128-key blocks, where turns measured slower)
// the warp schedulers interleave the warpgroups, and the one-consumer walkers of an SM, freely.
#pragma once

#include <cstdint>

#include "core/mask_rules.hpp"
#include "cuda/common/fwd_params.hpp"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/warpgroup.cuh"
#include "cuda/ptx/wgmma.cuh"
#include "cuda/sm80/fwd_softmax.cuh"
#include "cuda/sm80/fwd_tile_scheduler.cuh"
#include "cuda/sm80/kv_block_range.hpp"
#include "cuda/sm90/fwd_sync.hpp"
#include "cuda/sm90/fwd_tile_shape.hpp"

namespace flashkit::cuda::sm90 {

// x, as a value the compiler must recompute from rather than reuse earlier results of; and, being
// a volatile asm, computed where it stands relative to the other volatile asms (the wgmma waits).
__device__ __forceinline__ int opaque(int x) {
  int y;
  asm volatile("mov.b32 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

// Descriptor of k16 step ks of a K-major tile of `rows` rows (Q or K) at tiles + stage_bytes: its
// slab, then 32 bytes per step inside the 128-byte span; 8-row atoms 1024 bytes apart. Built
// from the descriptor of `tiles` by adds (smem_desc_advance), which the compiler hoists.
template <class T>
__device__ __forceinline__ std::uint64_t k_major_desc(std::uint32_t tiles,
                                                      std::uint32_t stage_bytes, int rows, int ks) {
  const std::uint32_t offset = (ks / 4) * rows * T::kSlabBytesPerRow + (ks % 4) * 32;
  return ptx::smem_desc_advance(
      ptx::smem_desc(tiles, 16, 8 * T::kSlabBytesPerRow, ptx::Swizzle::b128), stage_bytes + offset);
}

// Descriptor of keys 16 kk .. 16 kk + 15 of the V tile as wgmma's N-major B: 16 rows of 128 bytes
// per step; the next 64 columns of d (slab) block_n rows further (leading offset); the next 8
// keys one atom further (stride offset). The V tile is at tiles + stage_bytes.
template <class T>
__device__ __forceinline__ std::uint64_t v_desc(std::uint32_t tiles, std::uint32_t stage_bytes,
                                                int kk) {
  return ptx::smem_desc_advance(ptx::smem_desc(tiles, T::kBlockN * T::kSlabBytesPerRow,
                                               8 * T::kSlabBytesPerRow, ptx::Swizzle::b128),
                                stage_bytes + kk * 16 * T::kSlabBytesPerRow);
}

// The accumulators as the flat register arrays wgmma names: [1][n / 8][4] and [n / 2] are the
// same registers in the same order (ptx/wgmma.cuh, accumulator layout).
template <int kN>
__device__ __forceinline__ float (&flat(float (&a)[1][kN / 8][4]))[kN / 2] {
  return reinterpret_cast<float(&)[kN / 2]>(a);
}

template <class T>
struct ConsumerState {
  const FwdParams& p;
  const sm80::KvBlockRange& range;
  sm80::ScoreContext ctx;
  int warp, lane;
  std::uint32_t q_tile, k_tiles, v_tiles;
};

template <class T>
__device__ __forceinline__ void issue_qk(sm80::ScoreBlock<T>& s, const ConsumerState<T>& c,
                                         int stage) {
  const std::uint32_t k_stage = stage * T::kKvBytes;
  ptx::warpgroup_fence_operands(flat<T::kBlockN>(s));
#pragma unroll
  for (int ks = 0; ks < T::kD / 16; ++ks) {
    ptx::wgmma_ss<typename T::Elem, T::kBlockN, 0, 0>(
        flat<T::kBlockN>(s), k_major_desc<T>(c.q_tile, 0, T::kBlockM, ks),
        k_major_desc<T>(c.k_tiles, k_stage, T::kBlockN, ks), ks > 0);
  }
  ptx::wgmma_commit();
}

template <class T>
__device__ __forceinline__ void issue_pv(sm80::FwdAccum<T>& acc,
                                         const std::uint32_t (&probs)[T::kBlockN / 16][4],
                                         const ConsumerState<T>& c, int stage) {
  const std::uint32_t v_stage = stage * T::kKvBytes;
  ptx::warpgroup_fence_operands(flat<T::kD>(acc.o));
#pragma unroll
  for (int kk = 0; kk < T::kBlockN / 16; ++kk) {
    ptx::wgmma_rs<typename T::Elem, T::kD, 1>(flat<T::kD>(acc.o), probs[kk],
                                              v_desc<T>(c.v_tiles, v_stage, kk), true);
  }
  ptx::wgmma_commit();
}

// Block n's scores -> probabilities (the rows' running max and sum absorb them); alpha is what
// O still has to be scaled by. masked_ahead: with T::kMaskTestAhead, block_masked(n), which the
// caller settled before it waited for S.
template <class T>
__device__ __forceinline__ void softmax_of_block(sm80::ScoreBlock<T>& s, sm80::FwdAccum<T>& acc,
                                                 ConsumerState<T>& c, int n, bool masked_ahead,
                                                 float (&alpha)[1][2]) {
  ptx::warpgroup_fence_operands(flat<T::kBlockN>(s));
  c.ctx.col0 = std::int64_t(n) * T::kBlockN;
  const float factor = sm80::scores_to_base2<T>(s, c.p, c.ctx, c.warp, c.lane);
  const bool masked = T::kMaskTestAhead ? masked_ahead : c.range.needs_mask(n);
  if (masked) sm80::apply_mask<T>(s, c.p, c.ctx, c.warp, c.lane);
  sm80::softmax_update<T>(s, acc, alpha, factor);
}

// Whether block n needs the mask, settled (with T::kMaskTestAhead) before the wait for its S:
// the 64-bit bounds tests (~25 instructions) otherwise stand between S's completion and the
// softmax, on the path to the next P V (ncu, d 64 N 512: ~4.6 % of the warps' stall samples).
template <class T>
__device__ __forceinline__ bool block_masked(const sm80::KvBlockRange& range, int n) {
  return T::kMaskTestAhead && opaque(range.needs_mask(n) ? 1 : 0) != 0;
}

template <class T>
__device__ __forceinline__ void to_probs(std::uint32_t (&probs)[T::kBlockN / 16][4],
                                         const sm80::ScoreBlock<T>& s) {
#pragma unroll
  for (int kk = 0; kk < T::kBlockN / 16; ++kk) sm80::probs_as_a<T>(probs[kk], s, 0, kk);
}

// Waits for a K or V stage. Copies written through the generic proxy (PagedRowSource's
// cp.async) are made visible to wgmma's async-proxy reads by a proxy fence after the wait.
template <bool kGenericProxy>
__device__ __forceinline__ void wait_stage(std::uint64_t* full, std::uint32_t parity) {
  ptx::mbarrier_wait(full, parity);
  if constexpr (kGenericProxy) ptx::fence_proxy_async();
}

// tid: the thread among the consumer threads (0 .. kConsumerThreads - 1). q: the tile's Q
// buffer, which has landed once q_full completes its phase q_parity; with kQAfterS each thread
// arrives on q_empty once its last S is done. blocks: the CTA's count of
// blocks so far, which gives each block's stage and phase; advanced by the tile's.
// kKvGenericProxy: K and V arrive through cp.async (fwd_paged_rows.cuh).
template <class T, bool kKvGenericProxy, bool kQAfterS>
__device__ __forceinline__ void fwd_consumer_mainloop(const FwdParams& p, const sm80::FwdTile& tile,
                                                      const sm80::KvBlockRange& range,
                                                      unsigned char* smem, std::uint32_t q,
                                                      std::uint64_t* q_full, std::uint32_t q_parity,
                                                      std::uint64_t* q_empty, FwdBarriers& bar,
                                                      int tid, int consumer, int& blocks,
                                                      sm80::FwdAccum<T>& acc) {
  ConsumerState<T> c{p, range, {}, tid / 32, tid % 32, 0, 0, 0};
  c.q_tile = q + consumer * 64 * T::kSlabBytesPerRow;
  c.k_tiles = ptx::smem_address(smem) + T::kKOffset;
  c.v_tiles = ptx::smem_address(smem) + T::kVOffset;
  c.ctx.row0 = tile.row_begin;
  c.ctx.shift = core::diagonal_shift(p.mask, tile.span.len_q, tile.span.len_k);
  c.ctx.len_k = tile.span.len_k;
  c.ctx.slope = alibi_slope(p, tile.batch, tile.head);
  c.ctx.mods = p.has_score_mods();
  const bool last_consumer = consumer == T::kConsumers - 1;
  const auto my_turn = fwd_barrier_of(FwdNamedBarrier::schedule, consumer);
  const auto next_turn =
      fwd_barrier_of(FwdNamedBarrier::schedule, last_consumer ? 0 : consumer + 1);
  auto parity = [](int it) { return std::uint32_t(it / T::kStages) & 1; };

  // The first block: S alone, its softmax (O is still zero: alpha is moot).
  sm80::ScoreBlock<T> s;
  std::uint32_t probs[T::kBlockN / 16][4];
  float alpha[1][2];
  int n = range.first();
  int it = blocks;
  ptx::mbarrier_wait(q_full, q_parity);
  wait_stage<kKvGenericProxy>(&bar.k_full[it % T::kStages], parity(it));
  ptx::wgmma_fence();
  issue_qk<T>(s, c, it % T::kStages);
  const bool masked = block_masked<T>(range, n);
  ptx::wgmma_wait<0>();
  ptx::mbarrier_arrive(&bar.k_empty[it % T::kStages]);
  int next = range.next(n);
  if (kQAfterS && next < 0) ptx::mbarrier_arrive(q_empty);
  softmax_of_block<T>(s, acc, c, n, masked, alpha);
  to_probs<T>(probs, s);
  if constexpr (T::kRescaleUnderS) alpha[0][0] = alpha[0][1] = 1.0f;  // O is still zero

  if (T::kPingpong && last_consumer && next >= 0) ptx::named_barrier_arrive(next_turn, 256);
  for (++it; next >= 0; ++it) {
    const int k_stage = it % T::kStages, v_stage = (it - 1) % T::kStages;
    const int after = range.next(next);
    wait_stage<kKvGenericProxy>(&bar.k_full[k_stage], parity(it));
    wait_stage<kKvGenericProxy>(&bar.v_full[v_stage], parity(it - 1));
    if constexpr (T::kPingpong) ptx::named_barrier_sync(my_turn, 256);
    ptx::wgmma_fence();
    issue_qk<T>(s, c, k_stage);
    if constexpr (T::kRescaleUnderS) {
      sm80::rescale_o<T>(acc, alpha);  // block n's max, under S on the tensor cores
      ptx::wgmma_fence();
    }
    issue_pv<T>(acc, probs, c, v_stage);
    if (T::kPingpong && (!last_consumer || after >= 0)) ptx::named_barrier_arrive(next_turn, 256);

    const bool masked_next = block_masked<T>(range, next);
    ptx::wgmma_wait<1>();  // S of block `next` (committed first) is done; P V may still run
    ptx::mbarrier_arrive(&bar.k_empty[k_stage]);
    if (kQAfterS && after < 0) ptx::mbarrier_arrive(q_empty);
    softmax_of_block<T>(s, acc, c, next, masked_next, alpha);
    ptx::wgmma_wait<0>();
    ptx::warpgroup_fence_operands(flat<T::kD>(acc.o));
    ptx::mbarrier_arrive(&bar.v_empty[v_stage]);
    if constexpr (!T::kRescaleUnderS) sm80::rescale_o<T>(acc, alpha);
    to_probs<T>(probs, s);
    n = next;
    next = after;
  }

  // The last block's P V (its count is it - 1).
  const int v_stage = (it - 1) % T::kStages;
  wait_stage<kKvGenericProxy>(&bar.v_full[v_stage], parity(it - 1));
  if constexpr (T::kRescaleUnderS) sm80::rescale_o<T>(acc, alpha);
  ptx::wgmma_fence();
  issue_pv<T>(acc, probs, c, v_stage);
  ptx::wgmma_wait<0>();
  ptx::warpgroup_fence_operands(flat<T::kD>(acc.o));
  ptx::mbarrier_arrive(&bar.v_empty[v_stage]);
  blocks = it;
}

}  // namespace flashkit::cuda::sm90
