// XOR-swizzled shared-memory layout of a [rows x units] tile of 16-byte units (8 f16/bf16
// elements each), host and device, so the same function is used by the kernels and proven on the
// host (bijective, bank-conflict free) by tests/gpu/ptx/test_swizzle.cpp.
//
// Why: shared memory has 32 banks of 4 bytes, i.e. a 128-byte line holds 8 units. ldmatrix reads
// 8 rows at the same column unit per phase; with a row pitch that is a multiple of 128 bytes
// (d = 64, 128, 192, 256) all 8 rows would hit the same 4 banks, an 8-way conflict.
//
// Layout: the tile is cut into column strips of G units (G = 8 when units % 8 == 0, else 4: d = 32
// and 96 give 4 and 12 units per row). Each strip is stored row-major, and within a strip the
// linear unit index u = row * G + col has its low 3 bits XORed with bits 3..5 (which 128-byte
// line it is in), so the unit moves only inside its own line. For G = 8 that is col ^ (row % 8);
// for G = 4 it is (4 (row % 2) + col) ^ ((row / 2) % 8).
#pragma once

#include "core/host_device.hpp"

namespace flashkit::cuda::ptx {

template <int kRows, int kUnits>
struct SwizzledTile {
  static_assert(kUnits % 4 == 0, "rows must be a multiple of 64 bytes (32 f16/bf16 elements)");
  static constexpr int kStripUnits = kUnits % 8 == 0 ? 8 : 4;
  static constexpr int kRowCount = kRows;
  static constexpr int kUnitsTotal = kRows * kUnits;
  static constexpr int kBytes = kUnitsTotal * 16;

  // Physical unit index of logical (row, unit).
  FLASHKIT_HD static int unit_offset(int row, int unit) {
    const int strip = unit / kStripUnits;
    const int u = row * kStripUnits + unit % kStripUnits;
    return strip * kRows * kStripUnits + (u ^ ((u >> 3) & 7));
  }

  FLASHKIT_HD static int byte_offset(int row, int unit) { return unit_offset(row, unit) * 16; }

  // Fragment loads split the address into a per-lane register and compile-time parts: for rows
  // row0 + r with row0 a multiple of 16 and r < 16,
  //   byte_offset(row0 + r, unit) == fixed_offset(row0, unit) + (lane_offset(r) ^ unit_xor(unit))
  // (the XOR only mixes bits that row0 and whole strips never touch). A kernel then keeps one
  // register per operand and lane, and every k step is one XOR with an immediate, instead of
  // the ~80 precomputed addresses that spilled at d = 128.
  // Also, for any r (row0 + r < kRows), u < kStripUnits and a strip's first unit s0,
  //   byte_offset(row0 + r, s0 + u) == fixed_offset(row0, s0) + byte_offset(r, u),
  // so a copy loop whose passes move a multiple of 16 rows keeps one shared address per thread.
  FLASHKIT_HD static constexpr int fixed_offset(int row0, int unit) {
    return ((unit / kStripUnits) * kRows + row0) * kStripUnits * 16;
  }
  FLASHKIT_HD static int lane_offset(int r) { return byte_offset(r, 0); }
  FLASHKIT_HD static constexpr int unit_xor(int unit) { return (unit % kStripUnits) * 16; }

  // A warp's run of stores: rows row0 + 16 m + 8 h + r (row0 a multiple of 16, r < 8) and units
  // u0 + j (u0 a multiple of the run's length, a power of two; the run inside one strip), at
  // byte b < 16 of the unit. With 8-unit strips,
  //   byte_offset(row0 + 16 m + 8 h + r, u0 + j) + b
  //     == (run_base(row0, u0, r, b) ^ (16 j)) + m * kRows16Bytes + h * kRows8Bytes,
  // and that holds for a tile base added to run_base when the base is 128-byte aligned (the XOR
  // touches bits 4..6 only). One register per thread then addresses the whole run: one XOR per
  // unit, the rows as immediates (the backward's P^T / dS^T stores spent ~60 instructions a step
  // recomputing 16 addresses).
  static constexpr int kRows8Bytes = 8 * kStripUnits * 16;
  static constexpr int kRows16Bytes = 2 * kRows8Bytes;
  FLASHKIT_HD static int run_base(int row0, int u0, int r, int byte) {
    return fixed_offset(row0, u0) + ((lane_offset(r) + byte) ^ unit_xor(u0));
  }

  // The p-th logical (row, unit) in strip-major order: a copy loop that hands out p to consecutive
  // threads makes every 8 of them fill one 128-byte line (conflict-free 16-byte stores).
  FLASHKIT_HD static void copy_order(int p, int& row, int& unit) {
    const int strip = p / (kRows * kStripUnits);
    const int rest = p % (kRows * kStripUnits);
    row = rest / kStripUnits;
    unit = strip * kStripUnits + rest % kStripUnits;
  }
};

}  // namespace flashkit::cuda::ptx
