// The sm90 forward epilogue of one consumer warpgroup: row sums finished (quad reduction), O
// divided by l once, lse written (natural log), then O stored. When O has the input dtype and
// the warpgroup's 64 rows lie inside the tensor's token range (always without varlen: TMA clips
// at the sequence end; with varlen only when all 64 rows belong to the sequence), O goes through
// the warpgroup's own Q rows in shared memory (no other warpgroup reads them) and out with one
// TMA store per 64-column slab. Otherwise (f32 output, a varlen tile crossing its sequence's
// end) each quad stores its pairs straight from registers.
#pragma once

#include <cstdint>

#include "core/softmax_state.hpp"
#include "cuda/common/fwd_params.hpp"
#include "cuda/ptx/convert.cuh"
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

template <class T>
__device__ __forceinline__ void fwd_epilogue(const FwdParams& p, const FwdMaps& maps,
                                             const sm80::FwdTile& tile, unsigned char* smem,
                                             int consumer, sm80::FwdAccum<T>& acc) {
  using Elem = typename T::Elem;
  const int tid = threadIdx.x - 128, warp = tid / 32, lane = tid % 32;
  float inv_l[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    core::SoftmaxState<float> st = acc.row[0][half];
    st.l = ptx::quad_sum(st.l);
    inv_l[half] = st.l > 0.0f ? 1.0f / st.l : 0.0f;
    const int row = tile.row_begin + sm80::frag_row<T>(warp, lane, 0, 2 * half);
    if (p.lse != nullptr && lane % 4 == 0 && row < tile.row_end) {
      p.lse[core::element_offset(p.lse_layout, tile.batch, tile.span.q_start, row, tile.head)] =
          st.lse();
    }
  }

  const int wg_row0 = tile.row_begin + 64 * consumer;
  const bool varlen = p.cu_seqlens_q != nullptr;
  if (p.out_dtype == p.in_dtype && (!varlen || wg_row0 + 64 <= tile.row_end)) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = sm80::frag_row<T>(warp, lane, 0, 2 * half);  // within the 128-row tile
#pragma unroll
      for (int dn = 0; dn < T::kD / 8; ++dn) {
        const int col = sm80::frag_col(lane, dn, 0);
        const std::uint32_t linear = (col / 64) * T::kBlockM * T::kSlabBytesPerRow +
                                     row * T::kSlabBytesPerRow + (col % 64) * 2;
        *reinterpret_cast<std::uint32_t*>(smem + ptx::swizzled_offset(linear, ptx::Swizzle::b128)) =
            ptx::pack2<Elem>(acc.o[0][dn][2 * half] * inv_l[half],
                             acc.o[0][dn][2 * half + 1] * inv_l[half]);
      }
    }
    ptx::fence_proxy_async();
    ptx::named_barrier_sync(fwd_barrier_of(FwdNamedBarrier::epilogue, consumer), 128);
    if (tid % 128 == 0) {
      const int batch = varlen ? 0 : tile.batch;
#pragma unroll
      for (int s = 0; s < T::kSlabs; ++s) {
        const int c[4] = {s * 64, tile.head, int(tile.span.q_start) + wg_row0, batch};
        ptx::tma_store<4>(maps.out, smem + (s * T::kBlockM + 64 * consumer) * T::kSlabBytesPerRow,
                          c);
      }
      ptx::tma_store_commit();
      ptx::tma_store_wait<0>();  // written before the kernel ends: later kernels read out
    }
    return;
  }

  const bool out_f32 = p.out_dtype == DType::f32;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = tile.row_begin + sm80::frag_row<T>(warp, lane, 0, 2 * half);
    if (row >= tile.row_end) continue;
    const std::int64_t base =
        core::element_offset(p.out_layout, tile.batch, tile.span.q_start, row, tile.head);
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
}

}  // namespace flashkit::cuda::sm90
