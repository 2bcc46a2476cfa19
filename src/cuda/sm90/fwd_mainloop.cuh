// A consumer warpgroup of the sm90 forward: its 64 query rows against every visited KV block.
// Per block: S = Q K^T (wgmma, both operands in shared memory), the softmax on the accumulator
// registers (the same code as the sm80 forward: wgmma's m64 accumulator is mma.sync's m16n8
// layout once per warp), then O += P V (wgmma with P from registers, V N-major in shared memory),
// and the stage is released to the producer.
#pragma once

#include <cstdint>

#include "core/mask_rules.hpp"
#include "cuda/common/fwd_params.hpp"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/wgmma.cuh"
#include "cuda/sm80/fwd_softmax.cuh"
#include "cuda/sm80/fwd_tile_scheduler.cuh"
#include "cuda/sm80/kv_block_range.hpp"
#include "cuda/sm90/fwd_tile_shape.hpp"

namespace flashkit::cuda::sm90 {

// Descriptor of k16 step ks of a K-major tile of `rows` rows (Q or K): its slab, then 32 bytes
// per step inside the 128-byte span; 8-row atoms 1024 bytes apart.
template <class T>
__device__ __forceinline__ std::uint64_t k_major_desc(std::uint32_t tile, int rows, int ks) {
  const std::uint32_t offset = (ks / 4) * rows * T::kSlabBytesPerRow + (ks % 4) * 32;
  return ptx::smem_desc(tile + offset, 16, 8 * T::kSlabBytesPerRow, ptx::Swizzle::b128);
}

// Descriptor of keys 16 kk .. 16 kk + 15 of the V tile as wgmma's N-major B: 16 rows of 128 bytes
// per step; the next 64 columns of d (slab) block_n rows further (leading offset); the next 8
// keys one atom further (stride offset).
template <class T>
__device__ __forceinline__ std::uint64_t v_desc(std::uint32_t tile, int kk) {
  return ptx::smem_desc(tile + kk * 16 * T::kSlabBytesPerRow, T::kBlockN * T::kSlabBytesPerRow,
                        8 * T::kSlabBytesPerRow, ptx::Swizzle::b128);
}

// The accumulators as the flat register arrays wgmma names: [1][n / 8][4] and [n / 2] are the
// same registers in the same order (ptx/wgmma.cuh, accumulator layout).
template <int kN>
__device__ __forceinline__ float (&flat(float (&a)[1][kN / 8][4]))[kN / 2] {
  return reinterpret_cast<float(&)[kN / 2]>(a);
}

template <class T>
__device__ __forceinline__ void fwd_consumer_mainloop(const FwdParams& p, const sm80::FwdTile& tile,
                                                      const sm80::KvBlockRange& range,
                                                      unsigned char* smem, FwdBarriers& bar,
                                                      int consumer, sm80::FwdAccum<T>& acc) {
  using Elem = typename T::Elem;
  const int tid = threadIdx.x - 128;  // 0..255 over both consumer warpgroups
  const int warp = tid / 32, lane = tid % 32;
  const std::uint32_t q_tile = ptx::smem_address(smem) + consumer * 64 * T::kSlabBytesPerRow;
  const std::uint32_t k_tiles = ptx::smem_address(smem) + T::kKOffset;
  const std::uint32_t v_tiles = ptx::smem_address(smem) + T::kVOffset;

  sm80::ScoreContext ctx;
  ctx.row0 = tile.row_begin;
  ctx.shift = core::diagonal_shift(p.mask, tile.span.len_q, tile.span.len_k);
  ctx.len_k = tile.span.len_k;
  ctx.slope = alibi_slope(p, tile.batch, tile.head);
  ctx.mods = p.has_score_mods();

  ptx::mbarrier_wait(&bar.q_full, 0);
  int it = 0;
  for (int n = range.first(); n >= 0; n = range.next(n), ++it) {
    const int stage = it % T::kStages;
    const std::uint32_t parity = std::uint32_t(it / T::kStages) & 1;
    const std::uint32_t k_tile = k_tiles + stage * T::kKvBytes;
    const std::uint32_t v_tile = v_tiles + stage * T::kKvBytes;

    sm80::ScoreBlock<T> s;
    ptx::mbarrier_wait(&bar.k_full[stage], parity);
    ptx::warpgroup_fence_operands(flat<T::kBlockN>(s));
    ptx::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < T::kD / 16; ++ks) {
      ptx::wgmma_ss<Elem, T::kBlockN, 0, 0>(flat<T::kBlockN>(s),
                                            k_major_desc<T>(q_tile, T::kBlockM, ks),
                                            k_major_desc<T>(k_tile, T::kBlockN, ks), ks > 0);
    }
    ptx::wgmma_commit();
    ptx::wgmma_wait<0>();
    ptx::warpgroup_fence_operands(flat<T::kBlockN>(s));

    ctx.col0 = std::int64_t(n) * T::kBlockN;
    sm80::scores_to_base2<T>(s, p, ctx, warp, lane);
    if (range.needs_mask(n)) sm80::apply_mask<T>(s, p, ctx, warp, lane);
    sm80::online_softmax<T>(s, acc);
    std::uint32_t probs[T::kBlockN / 16][4];
#pragma unroll
    for (int kk = 0; kk < T::kBlockN / 16; ++kk) sm80::probs_as_a<T>(probs[kk], s, 0, kk);

    ptx::mbarrier_wait(&bar.v_full[stage], parity);
    ptx::warpgroup_fence_operands(flat<T::kD>(acc.o));
    ptx::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < T::kBlockN / 16; ++kk) {
      ptx::wgmma_rs<Elem, T::kD, 1>(flat<T::kD>(acc.o), probs[kk], v_desc<T>(v_tile, kk), true);
    }
    ptx::wgmma_commit();
    ptx::wgmma_wait<0>();
    ptx::warpgroup_fence_operands(flat<T::kD>(acc.o));
    ptx::mbarrier_arrive(&bar.kv_empty[stage]);
  }
}

}  // namespace flashkit::cuda::sm90
