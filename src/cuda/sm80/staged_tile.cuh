// mma.sync accumulators leaving a CTA through shared memory: each warp rounds its fp32 fragments
// to the output dtype into a swizzled tile, then smem_copy.cuh's store_tile writes whole 16-byte
// units, so a warp's global store covers 4 whole L2 lines where a store from the fragments
// touches 8 rows' 16 bytes (8 lines). Used by the dK/dV epilogue and the forward's.
#pragma once

#include <vector_types.h>

#include <cstdint>
#include <type_traits>

#include "cuda/ptx/convert.cuh"
#include "cuda/ptx/swizzle.hpp"

namespace flashkit::cuda::sm80 {

// A [kRows x kCols] tile of Out elements in shared memory, 16-byte units swizzled.
template <class Out, int kRows, int kCols>
using StagedTile = ptx::SwizzledTile<kRows, int(sizeof(Out)) * kCols / 16>;

// A warp's [kMt x 16] x [kNt x 8] share of an fp32 accumulator (mma.sync's C layout: lane (g, t)
// holds rows g and g + 8, columns 2t and 2t + 1 of each 16 x 8 tile), rows row0.., columns
// col0.., rounded to Out into a StagedTile. A warp's store puts 8 rows' 16 (f32: 32) bytes in
// distinct banks.
template <class Out, int kRows, int kCols, int kMt, int kNt>
__device__ __forceinline__ void stage_fragments(unsigned char* tile,
                                                const float (&acc)[kMt][kNt][4], int row0, int col0,
                                                int g, int t) {
  using Tile = StagedTile<Out, kRows, kCols>;
  constexpr int kPerUnit = 16 / int(sizeof(Out));
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int lane_off = Tile::lane_offset(half * 8 + g);
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) {
        const int col = col0 + nt * 8 + 2 * t;  // this lane's pair
        const int unit = col / kPerUnit;
        const int off = Tile::fixed_offset(row0 + 16 * mt, unit) +
                        (lane_off ^ Tile::unit_xor(unit)) + col % kPerUnit * int(sizeof(Out));
        const float x0 = acc[mt][nt][2 * half], x1 = acc[mt][nt][2 * half + 1];
        if constexpr (std::is_same_v<Out, float>) {
          *reinterpret_cast<float2*>(tile + off) = {x0, x1};
        } else {
          *reinterpret_cast<std::uint32_t*>(tile + off) = ptx::pack2<Out>(x0, x1);
        }
      }
    }
}

}  // namespace flashkit::cuda::sm80
