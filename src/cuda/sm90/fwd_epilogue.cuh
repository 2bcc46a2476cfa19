// The sm90 forward epilogue of one consumer warpgroup: row sums finished (quad reduction), O
// divided by l once, lse written (natural log), then O stored. When O has the input dtype and
// the warpgroup's 64 rows are 64 tokens of one head inside the tensor's token range (always
// without varlen and without GQA packing or key splits of a paged call: TMA clips at the sequence
// end; with varlen only when all 64 rows belong to the sequence), O goes through
// the warpgroup's own Q rows in shared memory (no other warpgroup reads them) and out with one
// TMA store per 64-column slab; the kernel waits for the stores' completion before it ends.
// Otherwise (f32 output, a varlen tile crossing its sequence's end, packed rows, partial states)
// each quad stores its pairs straight from registers, where the Source places the rows. d = 256's
// persistent walk (kQAfterS), whose one Q buffer the mainloop has already released, stages O over
// the V stages instead, once every consumer warpgroup is past its last P V (as FlashAttention-3
// does); the producer loads the next tile's V only after the stores have read it.
#pragma once

#include <cstdint>

#include "core/softmax_state.hpp"
#include "cuda/common/fwd_params.hpp"
#include "cuda/ptx/convert.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/smem_desc.hpp"
#include "cuda/ptx/tma.cuh"
#include "cuda/ptx/warp_reduce.cuh"
#include "cuda/ptx/warpgroup.cuh"
#include "cuda/sm80/fwd_softmax.cuh"
#include "cuda/sm80/fwd_tile_scheduler.cuh"
#include "cuda/sm90/fwd_maps.hpp"
#include "cuda/sm90/fwd_sync.hpp"
#include "cuda/sm90/fwd_tile_shape.hpp"

namespace flashkit::cuda::sm90 {

// Where the epilogue stages O element (row, dn * 8 + col0) of a tile (col0 < 8 even) in the Q
// buffer's layout: 64-column slabs of [kBlockM rows][128 bytes], 16-byte units XOR-swizzled by
// row % 8 (ptx::swizzled_offset). Written as one per-row register (row_base) XORed with a
// compile-time unit and plus a compile-time slab offset per dn: with the full swizzled_offset
// per dn the compiler keeps d / 8 addresses per row live across a persistent CTA's tiles.
__device__ __host__ constexpr std::uint32_t staged_row_base(int row, int col0) {
  return std::uint32_t(row) * 128 + (std::uint32_t(row % 8) << 4) + std::uint32_t(col0) * 2;
}
template <class T>
__device__ __host__ constexpr std::uint32_t staged_offset(std::uint32_t row_base, int dn) {
  return (row_base ^ (std::uint32_t(dn % 8) << 4)) + std::uint32_t(dn / 8) * T::kBlockM * 128;
}
template <class T>
constexpr bool staged_offsets_are_swizzled() {
  for (int row = 0; row < T::kBlockM; ++row) {
    for (int col0 = 0; col0 < 8; col0 += 2) {
      for (int dn = 0; dn < T::kD / 8; ++dn) {
        const int col = dn * 8 + col0;
        const std::uint32_t linear =
            std::uint32_t((col / 64) * T::kBlockM * 128 + row * 128 + (col % 64) * 2);
        if (staged_offset<T>(staged_row_base(row, col0), dn) !=
            ptx::swizzled_offset(linear, ptx::Swizzle::b128)) {
          return false;
        }
      }
    }
  }
  return true;
}

// tid: the thread among the stream's consumer threads. staging: where O is staged, the tile's Q
// buffer or (kQAfterS) the V stages; staged_read: the barrier on which the warpgroup's elected
// thread arrives once nothing of the warpgroup reads the staging any more (fwd_sync.hpp). wg: the
// warpgroup among the CTA's consumer warpgroups, which names its epilogue barrier.
template <class T, bool kQAfterS, class Source>
__device__ __forceinline__ void fwd_epilogue(const FwdParams& p, const FwdMaps& maps,
                                             const Source& src, const sm80::FwdTile& tile,
                                             unsigned char* staging, std::uint64_t* staged_read,
                                             int tid, int consumer, int wg,
                                             sm80::FwdAccum<T>& acc) {
  using Elem = typename T::Elem;
  static_assert(T::kSlabBytesPerRow == 128 && staged_offsets_are_swizzled<T>(),
                "the staging addresses are the Q tiles' 128-byte swizzle");
  const int warp = tid / 32, lane = tid % 32;
  float inv_l[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    core::SoftmaxState<float> st = acc.row[0][half];
    st.l = ptx::quad_sum(st.l);
    inv_l[half] = st.l > 0.0f ? 1.0f / st.l : 0.0f;
    const int row = tile.row_begin + sm80::frag_row<T>(warp, lane, 0, 2 * half);
    if (p.lse != nullptr && lane % 4 == 0 && row < tile.row_end) {
      p.lse[src.row_offset(p.lse_layout, tile, row)] = st.lse();
    }
  }

  const int wg_row0 = tile.row_begin + 64 * consumer;
  const bool varlen = p.cu_seqlens_q != nullptr;
  const auto wg_barrier = fwd_barrier_of(FwdNamedBarrier::epilogue, wg);
  static_assert(!kQAfterS || 2 * T::kKvBytes >= T::kQBytes, "O staged over the V stages");
  if constexpr (kQAfterS) ptx::named_barrier_sync(FwdNamedBarrier::v_done, T::kConsumerThreads);
  if (p.out_dtype == p.in_dtype && src.rows_are_tokens() &&
      (!varlen || wg_row0 + 64 <= tile.row_end)) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = sm80::frag_row<T>(warp, lane, 0, 2 * half);  // within the tile
      const std::uint32_t row_base = staged_row_base(row, sm80::frag_col(lane, 0, 0));
#pragma unroll
      for (int dn = 0; dn < T::kD / 8; ++dn) {
        *reinterpret_cast<std::uint32_t*>(staging + staged_offset<T>(row_base, dn)) =
            ptx::pack2<Elem>(acc.o[0][dn][2 * half] * inv_l[half],
                             acc.o[0][dn][2 * half + 1] * inv_l[half]);
      }
    }
    ptx::fence_proxy_async();
    ptx::named_barrier_sync(wg_barrier, 128);
    if (tid % 128 == 0) {
      const int batch = varlen ? 0 : tile.batch;
#pragma unroll
      for (int s = 0; s < T::kSlabs; ++s) {
        const int c[4] = {s * 64, tile.head, int(tile.span.q_start) + wg_row0, batch};
        ptx::tma_store<4>(maps.out,
                          staging + (s * T::kBlockM + 64 * consumer) * T::kSlabBytesPerRow, c);
      }
      ptx::tma_store_commit();
      ptx::tma_store_wait_read<0>();  // the stores have read the staged rows
      ptx::mbarrier_arrive(staged_read);
    }
    return;
  }

  const bool out_f32 = p.out_dtype == DType::f32;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = tile.row_begin + sm80::frag_row<T>(warp, lane, 0, 2 * half);
    if (row >= tile.row_end) continue;
    const std::int64_t base = src.row_offset(p.out_layout, tile, row);
#pragma unroll
    for (int dn = 0; dn < T::kD / 8; ++dn) {
      const int col = sm80::frag_col(lane, dn, 0);
      const float x0 = acc.o[0][dn][2 * half] * inv_l[half];
      const float x1 = acc.o[0][dn][2 * half + 1] * inv_l[half];
      if (out_f32) {
        *reinterpret_cast<float2*>(static_cast<float*>(p.out) + base + col) = {x0, x1};
      } else {
        *reinterpret_cast<std::uint32_t*>(static_cast<Elem*>(p.out) + base + col) =
            ptx::pack2<Elem>(x0, x1);
      }
    }
  }
  // Q: every thread's wgmma is past its rows. V: nothing of them was staged.
  if constexpr (!kQAfterS) ptx::named_barrier_sync(wg_barrier, 128);
  if (tid % 128 == 0) ptx::mbarrier_arrive(staged_read);
}

}  // namespace flashkit::cuda::sm90
