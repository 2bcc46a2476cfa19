// Shared-memory layouts of the Hopper async engines (host and device): the swizzle pattern that
// TMA writes and wgmma reads, and wgmma's matrix descriptor. Layout rules: ptx/wgmma.cuh.
#pragma once

#include <cstdint>

#include "core/host_device.hpp"

namespace flashkit::cuda::ptx {

// Descriptor bits 62..63, and the span each mode swizzles over.
enum class Swizzle : int { none = 0, b128 = 1, b64 = 2, b32 = 3 };

FLASHKIT_HD constexpr int swizzle_span_bytes(Swizzle s) {
  return s == Swizzle::b128 ? 128 : s == Swizzle::b64 ? 64 : s == Swizzle::b32 ? 32 : 16;
}

// Byte offset, from a tile base aligned to 8 spans, where the byte at linear offset `linear`
// (row-major rows of one span) lives: bits 4.. of the 16-byte unit index XORed with bits 7.. of
// the address (the row within the 8-row atom for a 128-byte span; for 64- and 32-byte spans two
// and four rows share one 128-byte line). CUTLASS calls this Swizzle<log2(span/16), 4, 3>.
FLASHKIT_HD constexpr std::uint32_t swizzled_offset(std::uint32_t linear, Swizzle s) {
  const std::uint32_t mask = static_cast<std::uint32_t>(swizzle_span_bytes(s) / 16 - 1);
  return linear ^ (((linear >> 7) & mask) << 4);
}

// The 64-bit matrix descriptor: start address, leading and stride byte offsets (each >> 4 in 14
// bits), base offset 0 (tiles start on an atom boundary), swizzle mode.
FLASHKIT_HD constexpr std::uint64_t smem_desc(std::uint32_t smem_addr, std::uint32_t leading_bytes,
                                              std::uint32_t stride_bytes, Swizzle s) {
  auto field = [](std::uint32_t bytes) {
    return static_cast<std::uint64_t>((bytes & 0x3FFFF) >> 4);
  };
  return field(smem_addr) | (field(leading_bytes) << 16) | (field(stride_bytes) << 32) |
         (static_cast<std::uint64_t>(s) << 62);
}

// The descriptor of the same layout starting `bytes` (a multiple of 16) further: one add to the
// start address field instead of rebuilding the descriptor (a mask, a shift and an or). Exact
// while the start stays below 256 KB, the field's reach, which shared memory (<= 228 KB) does.
FLASHKIT_HD constexpr std::uint64_t smem_desc_advance(std::uint64_t desc, std::uint32_t bytes) {
  return desc + (bytes >> 4);
}

}  // namespace flashkit::cuda::ptx
