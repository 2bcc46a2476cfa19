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

namespace flashkit::cuda::sm80 {

// Stores go straight from registers: a quad writes 16 contiguous bytes per row and n8 tile
// (8 bytes with f32 output). The epilogue moves d * 2 bytes per row once, against the
// mainloop's 4 * d * len_k flops per row, so it is not worth a trip through shared memory.
// Rows are placed by the K/V source's reader (kv_source.cuh: row_offset).
template <class T, class Rows>
__device__ __forceinline__ void fwd_epilogue(const FwdParams& p, const FwdTile& tile,
                                             const Rows& rows, FwdAccum<T>& acc) {
  using Elem = typename T::Elem;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const bool out_f32 = p.out_dtype == DType::f32;
#pragma unroll
  for (int mt = 0; mt < T::kMmaM; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      core::SoftmaxState<float> st = acc.row[mt][half];
      st.l = ptx::quad_sum(st.l);
      const float inv_l = st.l > 0.0f ? 1.0f / st.l : 0.0f;
      const int row = tile.row_begin + frag_row<T>(warp, lane, mt, 2 * half);
      if (row >= tile.row_end) continue;
      const std::int64_t base = rows.row_offset(p.out_layout, tile, row);
#pragma unroll
      for (int dn = 0; dn < T::kD / 8; ++dn) {
        const int col = frag_col(lane, dn, 0);
        const float x0 = acc.o[mt][dn][2 * half] * inv_l;
        const float x1 = acc.o[mt][dn][2 * half + 1] * inv_l;
        if (out_f32) {
          *reinterpret_cast<float2*>(static_cast<float*>(p.out) + base + col) = {x0, x1};
        } else {
          *reinterpret_cast<std::uint32_t*>(static_cast<Elem*>(p.out) + base + col) =
              ptx::pack2<Elem>(x0, x1);
        }
      }
      if (p.lse != nullptr && lane % 4 == 0) {
        p.lse[rows.row_offset(p.lse_layout, tile, row)] = st.lse();
      }
    }
}

}  // namespace flashkit::cuda::sm80
