// The mask and score rules of flashkit::Mask in one place, shared by every backend.
// Indices are within one sequence: query i in [0, len_q), key j in [0, len_k).
#pragma once

#include <cstdint>

#include "core/host_device.hpp"

namespace flashkit::core {

// flashkit::Mask without the ALiBi tensor, plain data a kernel can take by value.
struct MaskRule {
  bool causal = false;
  bool bottom_right = true;
  std::int64_t window_left = -1;  // -1: unbounded
  std::int64_t window_right = -1;
  std::int64_t prefix_len = 0;
  float softcap = 0.0f;  // 0: off
  std::int64_t diagonal_offset = 0;
};

// Where query i's causal diagonal meets the keys: diag = i + shift.
FLASHKIT_HD std::int64_t diagonal_shift(const MaskRule& rule, std::int64_t len_q,
                                        std::int64_t len_k) {
  return (rule.bottom_right ? len_k - len_q : 0) + rule.diagonal_offset;
}

// The contiguous band [lo, hi] of keys that causal and window allow for a query on diagonal
// `diag` (before the prefix-LM rule, which adds keys [0, prefix_len)). lo > hi: empty band.
struct KeyBand {
  std::int64_t lo, hi;
};

FLASHKIT_HD KeyBand key_band(const MaskRule& rule, std::int64_t diag, std::int64_t len_k) {
  std::int64_t lo = 0;
  std::int64_t hi = len_k - 1;
  if (rule.window_left >= 0 && diag - rule.window_left > lo) lo = diag - rule.window_left;
  if (rule.causal && diag < hi) hi = diag;
  if (rule.window_right >= 0 && diag + rule.window_right < hi) hi = diag + rule.window_right;
  return {lo, hi};
}

FLASHKIT_HD bool key_visible(const MaskRule& rule, std::int64_t diag, std::int64_t j,
                             std::int64_t len_k) {
  if (j < rule.prefix_len) return true;
  const KeyBand band = key_band(rule, diag, len_k);
  return j >= band.lo && j <= band.hi;
}

// True when any rule can hide a key (so kernels know whether masking work is needed at all).
FLASHKIT_HD bool masks_anything(const MaskRule& rule) {
  return rule.causal || rule.window_left >= 0 || rule.window_right >= 0;
}

// ALiBi bias for one (query, key) pair: -slope * |diag - j|.
template <typename T>
FLASHKIT_HD T alibi_bias(T slope, std::int64_t diag, std::int64_t j) {
  const std::int64_t distance = diag >= j ? diag - j : j - diag;
  return -slope * static_cast<T>(distance);
}

}  // namespace flashkit::core
