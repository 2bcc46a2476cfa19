// A validated apply_rotary call reduced to numbers (core/rotary.cpp makes it), and the rotation
// that the CPU and CUDA backends share.
#pragma once

#include <cstdint>

#include "core/host_device.hpp"

namespace flashkit::core {

enum class RotaryPositions : std::uint8_t { index, offsets, ids };

struct RotaryDims {
  std::int64_t batch = 0;
  std::int64_t seqlen = 0;  // tokens per sequence; the packed dim's size when packed
  std::int64_t heads = 0, head_dim = 0, rotary_dim = 0, max_positions = 0;
  bool packed = false;
  RotaryPositions positions = RotaryPositions::index;
};

// The elements of pair i of a row whose rotated part is 2 * half wide: (i, i + half), or
// interleaved (2i, 2i + 1).
FLASHKIT_HD void rotary_pair(std::int64_t i, std::int64_t half, bool interleaved,
                             std::int64_t& first, std::int64_t& second) {
  first = interleaved ? 2 * i : i;
  second = interleaved ? 2 * i + 1 : i + half;
}

// (x1, x2) rotated by the angle whose cos and sin are c and s (by -angle when conjugate).
FLASHKIT_HD void rotate_pair(float x1, float x2, float c, float s, bool conjugate, float& y1,
                             float& y2) {
  if (conjugate) s = -s;
  y1 = x1 * c - x2 * s;
  y2 = x1 * s + x2 * c;
}

}  // namespace flashkit::core
