// Tile copies of the sm80 kernels between global memory and the swizzled shared layout of
// ptx/swizzle.hpp: in by 16-byte cp.async per thread (rows past the sequence zero-filled), out by
// 16-byte shared loads and global stores.
#pragma once

#include <vector_types.h>

#include <cstdint>

#include "cuda/ptx/cp_async.cuh"

namespace flashkit::cuda::sm80 {

// Issues (does not commit) the copy of rows [0, valid_rows) of a [Tile rows x Tile units] tile
// whose row r starts at gmem + r * row_stride (elements); rows >= valid_rows become zeros.
// kSharedBase: one shared address per thread plus compile-time offsets (below); off, each unit's
// address is computed where it is used.
template <class Tile, int kThreads, bool kSharedBase = true, class Elem>
__device__ __forceinline__ void copy_tile_async(std::uint32_t smem, const Elem* gmem,
                                                std::int64_t row_stride, int valid_rows) {
  constexpr int kPerThread = Tile::kUnitsTotal / kThreads;
  constexpr int kS = Tile::kStripUnits, kStrip = Tile::kRowCount * kS;  // units in a strip
  if constexpr (kStrip % kThreads == 0 && kThreads % kS == 0) {
    // Each pass of kThreads units stays inside one strip, so a thread keeps its unit column and
    // moves down kThreads / kS rows a pass: one source pointer per thread and 64-bit adds, not
    // a 64-bit row * stride product per unit (~16 instructions of a copy's ~130 at d = 128).
    constexpr int kPassRows = kThreads / kS;
    const int r = int(threadIdx.x) / kS, u = int(threadIdx.x) % kS;
    const Elem* src = gmem + r * row_stride + u * 8;
    const std::int64_t pass_stride = kPassRows * row_stride;
    // Likewise one shared address: where a pass starts a whole number of swizzle periods down
    // (16 rows: every kernel's copies; not a single warp's), each unit's destination is this
    // thread's pass-0 unit plus a compile-time offset (ptx/swizzle.hpp, fixed_offset). Computed
    // per unit, ptxas kept one register per unit (16 for K at d = 256) or spilled them (the d =
    // 64 backward reloaded 6 a step).
    const std::uint32_t dst = smem + Tile::byte_offset(r, u);
    auto unit_dst = [&](int pass, int strip) {
      if constexpr (kSharedBase && kPassRows % 16 == 0) {
        return dst + Tile::fixed_offset(pass * kPassRows, strip * kS);
      } else {
        return smem + Tile::byte_offset(pass * kPassRows + r, strip * kS + u);
      }
    };
    if (valid_rows >= Tile::kRowCount) {
      // Every row exists (all but a sequence's last tile): no per-unit predicate or pointer
      // select, two adds a unit (a d = 128 backward step spent ~115 instructions on its 8
      // copies, against ~30 this way).
#pragma unroll
      for (int it = 0; it < kPerThread; ++it) {
        const int strip = it * kThreads / kStrip, pass = it * kThreads % kStrip / kThreads;
        ptx::cp_async_16(unit_dst(pass, strip), src + pass * pass_stride + strip * kS * 8);
      }
      return;
    }
#pragma unroll
    for (int it = 0; it < kPerThread; ++it) {
      const int strip = it * kThreads / kStrip, pass = it * kThreads % kStrip / kThreads;
      const int row = pass * kPassRows + r;
      const bool valid = row < valid_rows;
      ptx::cp_async_16(unit_dst(pass, strip),
                       valid ? src + pass * pass_stride + strip * kS * 8 : gmem, valid);
    }
  } else {
#pragma unroll
    for (int it = 0; it < kPerThread; ++it) {
      int row, unit;
      Tile::copy_order(it * kThreads + int(threadIdx.x), row, unit);
      const bool valid = row < valid_rows;
      const Elem* src = valid ? gmem + row * row_stride + unit * 8 : gmem;
      ptx::cp_async_16(smem + Tile::byte_offset(row, unit), src, valid);
    }
  }
}

// Writes rows [0, valid_rows) of a [Tile rows x Tile units] tile to gmem, row r at gmem +
// row_offset(r) elements (16-byte aligned rows). Units go to threads in Tile::copy_order, so 8
// consecutive threads read one 128-byte shared line (no bank conflict) and write 128 contiguous
// bytes of one row: a warp's store covers 4 whole L2 lines.
template <class Tile, int kThreads, class Elem, class RowOffset>
__device__ __forceinline__ void store_tile_rows(const unsigned char* smem, Elem* gmem,
                                                const RowOffset& row_offset, int valid_rows) {
  static_assert(Tile::kUnitsTotal % kThreads == 0, "every thread stores the same number of units");
#pragma unroll
  for (int it = 0; it < Tile::kUnitsTotal / kThreads; ++it) {
    int row, unit;
    Tile::copy_order(it * kThreads + int(threadIdx.x), row, unit);
    if (row < valid_rows) {
      *reinterpret_cast<uint4*>(gmem + row_offset(row) + unit * (16 / int(sizeof(Elem)))) =
          *reinterpret_cast<const uint4*>(smem + Tile::byte_offset(row, unit));
    }
  }
}

// The same with row r at gmem + r * row_stride elements. Where a pass of kThreads units stays
// inside one strip and moves a whole number of swizzle periods (copy_tile_async's condition), a
// thread keeps one global pointer and one shared address and every unit is an add of a
// compile-time or per-pass offset: the same (row, unit) order as store_tile_rows, whose per-unit
// copy_order division, 64-bit row offset and bounds branch were ~720 of the 1173 instructions
// along the d = 256 forward's epilogue (docs/kernels/sm80_fwd.md, v14).
template <class Tile, int kThreads, class Elem>
__device__ __forceinline__ void store_tile(const unsigned char* smem, Elem* gmem,
                                           std::int64_t row_stride, int valid_rows) {
  constexpr int kS = Tile::kStripUnits, kStrip = Tile::kRowCount * kS;
  if constexpr (kStrip % kThreads == 0 && kThreads % kS == 0 && kThreads / kS % 16 == 0) {
    static_assert(Tile::kUnitsTotal % kThreads == 0,
                  "every thread stores the same number of units");
    constexpr int kPerThread = Tile::kUnitsTotal / kThreads, kPassRows = kThreads / kS;
    constexpr int kPerUnit = 16 / int(sizeof(Elem));
    const int r = int(threadIdx.x) / kS, u = int(threadIdx.x) % kS;
    Elem* dst = gmem + r * row_stride + u * kPerUnit;
    const std::int64_t pass_stride = kPassRows * row_stride;
    const unsigned char* src = smem + Tile::byte_offset(r, u);
#pragma unroll
    for (int it = 0; it < kPerThread; ++it) {
      const int strip = it * kThreads / kStrip, pass = it * kThreads % kStrip / kThreads;
      if (valid_rows >= Tile::kRowCount || pass * kPassRows + r < valid_rows) {
        *reinterpret_cast<uint4*>(dst + pass * pass_stride + strip * kS * kPerUnit) =
            *reinterpret_cast<const uint4*>(src + Tile::fixed_offset(pass * kPassRows, strip * kS));
      }
    }
  } else {
    store_tile_rows<Tile, kThreads>(
        smem, gmem, [row_stride](int row) { return row * row_stride; }, valid_rows);
  }
}

}  // namespace flashkit::cuda::sm80
