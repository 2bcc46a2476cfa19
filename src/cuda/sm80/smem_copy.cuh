// Global -> shared tile copies of the sm80 kernels: 16-byte cp.async per thread into the
// swizzled layout of ptx/swizzle.hpp, rows past the sequence zero-filled.
#pragma once

#include <cstdint>

#include "cuda/ptx/cp_async.cuh"

namespace flashkit::cuda::sm80 {

// Issues (does not commit) the copy of rows [0, valid_rows) of a [Tile rows x Tile units] tile
// whose row r starts at gmem + r * row_stride (elements); rows >= valid_rows become zeros.
template <class Tile, int kThreads, class Elem>
__device__ __forceinline__ void copy_tile_async(std::uint32_t smem, const Elem* gmem,
                                                std::int64_t row_stride, int valid_rows) {
  constexpr int kPerThread = Tile::kUnitsTotal / kThreads;
#pragma unroll
  for (int it = 0; it < kPerThread; ++it) {
    int row, unit;
    Tile::copy_order(it * kThreads + int(threadIdx.x), row, unit);
    const bool valid = row < valid_rows;
    const Elem* src = valid ? gmem + row * row_stride + unit * 8 : gmem;
    ptx::cp_async_16(smem + Tile::byte_offset(row, unit), src, valid);
  }
}

}  // namespace flashkit::cuda::sm80
