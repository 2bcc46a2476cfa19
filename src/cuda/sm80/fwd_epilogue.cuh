// The sm80 forward epilogue: finish the row sums (quad reduction of the per-thread partial l),
// divide O by l once (deferred rescaling), write O in the output dtype and lse (natural log).
// Rows that saw no key have l = 0: O = 0 and lse = -inf.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/fwd_params.hpp"
#include "cuda/ptx/convert.cuh"
#include "cuda/ptx/warp_reduce.cuh"
#include "cuda/sm80/fwd_softmax.cuh"
#include "cuda/sm80/fwd_tile_scheduler.cuh"
#include "cuda/sm80/smem_copy.cuh"
#include "cuda/sm80/staged_tile.cuh"

namespace flashkit::cuda::sm80 {

// O leaves through shared memory (staged_tile.cuh): from the fragments a quad writes 16 bytes of
// each of 8 rows per store, 8 L2 lines a warp instruction (2048 line accesses a 128 x 128 bf16
// tile), against 4 whole lines per store this way (512). The mainloop's buffers are free by then:
// its last block waited for its own copies, and the barrier below waits for every warp's last
// P V. lse goes from registers (one float a row). Rows are placed by the K/V source's reader
// (kv_source.cuh: row_offset).
template <class T, class Rows>
__device__ __forceinline__ void fwd_epilogue(const FwdParams& p, const FwdTile& tile,
                                             const Rows& rows, FwdAccum<T>& acc,
                                             unsigned char* smem) {
  using Elem = typename T::Elem;
  static_assert(StagedTile<float, T::kBlockM, T::kD>::kBytes <= T::kSmemBytes,
                "an f32 O tile fits the mainloop's shared memory");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int mt = 0; mt < T::kMmaM; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      core::SoftmaxState<float> st = acc.row[mt][half];
      st.l = ptx::quad_sum(st.l);
      const float inv_l = st.l > 0.0f ? 1.0f / st.l : 0.0f;
#pragma unroll
      for (int dn = 0; dn < T::kD / 8; ++dn) {
        acc.o[mt][dn][2 * half] *= inv_l;
        acc.o[mt][dn][2 * half + 1] *= inv_l;
      }
      const int row = tile.row_begin + frag_row<T>(warp, lane, mt, 2 * half);
      if (p.lse != nullptr && lane % 4 == 0 && row < tile.row_end) {
        p.lse[rows.row_offset(p.lse_layout, tile, row)] = st.lse();
      }
    }
  const int rows_here = tile.row_end - tile.row_begin;
  auto row_offset = [&](int r) { return rows.row_offset(p.out_layout, tile, tile.row_begin + r); };
  auto store = [&](auto* out, auto staged) {
    using Tile = decltype(staged);
    if constexpr (Rows::kLinearRows) {
      store_tile<Tile, T::kThreads>(smem, out + row_offset(0), p.out_layout.token_stride,
                                    rows_here);
    } else {
      store_tile_rows<Tile, T::kThreads>(smem, out, row_offset, rows_here);
    }
  };
  __syncthreads();  // every warp is past its last P V: Q, K and V are read no more
  if (p.out_dtype == DType::f32) {
    stage_fragments<float, T::kBlockM, T::kD>(smem, acc.o, warp * T::kRowsPerWarp, 0, lane / 4,
                                              lane % 4);
    __syncthreads();
    store(static_cast<float*>(p.out), StagedTile<float, T::kBlockM, T::kD>{});
  } else {
    stage_fragments<Elem, T::kBlockM, T::kD>(smem, acc.o, warp * T::kRowsPerWarp, 0, lane / 4,
                                             lane % 4);
    __syncthreads();
    store(static_cast<Elem*>(p.out), StagedTile<Elem, T::kBlockM, T::kD>{});
  }
}

}  // namespace flashkit::cuda::sm80
