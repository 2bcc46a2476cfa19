// Which KV blocks a tile of query rows must visit, and which of them cross a mask edge: causal
// and sliding-window block skipping plus the prefix-LM rule, host and device so the host test
// (tests/gpu/test_kv_block_range.cpp) proves it against core::key_visible element by element.
//
// Rows i of the tile see keys in the band [lo(i), hi(i)] (core::key_band) plus the prefix
// [0, prefix_len). lo and hi never decrease with i, so the band keys of the tile lie in
// [lo(first row), hi(last row)] and a block is fully visible to every row when
// lo(last row) <= its first key and hi(first row) >= its last key.
#pragma once

#include <cstdint>

#include "core/host_device.hpp"
#include "core/mask_rules.hpp"

namespace flashkit::cuda::sm80 {

struct KvBlockRange {
  int band_first, band_last;  // band blocks; band_last < band_first when empty
  int prefix_last;            // prefix blocks 0..prefix_last; -1 when none
  // Blocks that need no element mask, as block indices so that the per-block test is three
  // 32-bit compares: those below clear_below (every key under both the prefix's end and the
  // sequence's end) and clear_first..clear_last (every row's band covers the whole block). The
  // 64-bit key bounds tested per block instead cost ~25 instructions between a block's S and its
  // softmax (SASS of the d = 256 forward: 877 a block, FA2's 782).
  int clear_below, clear_first, clear_last;

  // Blocks are visited from the last down (the diagonal, masked blocks first, as FA2 does);
  // -1 ends the walk.
  FLASHKIT_HD int first() const { return band_last > prefix_last ? band_last : prefix_last; }
  FLASHKIT_HD int next(int n) const {
    --n;
    if (n > prefix_last && n < band_first) n = prefix_last;  // jump the hidden gap
    return n;
  }

  // The number of blocks the walk visits (the fp32 forward's key splits divide it).
  FLASHKIT_HD int count() const {
    const int band_from = band_first > prefix_last ? band_first : prefix_last + 1;
    return prefix_last + 1 + (band_last >= band_from ? band_last - band_from + 1 : 0);
  }

  // True when some (row, key) of block n may be hidden or past the sequence, so scores need the
  // element-wise mask.
  FLASHKIT_HD bool needs_mask(int n) const {
    return n >= clear_below && (n < clear_first || n > clear_last);
  }
};

namespace detail {

// x clamped to [lo, hi], as an int.
FLASHKIT_HD int clamp_block(std::int64_t x, std::int64_t lo, std::int64_t hi) {
  return int(x < lo ? lo : x > hi ? hi : x);
}

}  // namespace detail

// Rows first_row..last_row (indices within the sequence, last_row < len_q) of one query tile.
FLASHKIT_HD KvBlockRange kv_block_range(const core::MaskRule& rule, std::int64_t first_row,
                                        std::int64_t last_row, std::int64_t len_q,
                                        std::int64_t len_k, int block_n) {
  const std::int64_t shift = core::diagonal_shift(rule, len_q, len_k);
  const core::KeyBand first = core::key_band(rule, first_row + shift, len_k);
  const core::KeyBand last = core::key_band(rule, last_row + shift, len_k);
  KvBlockRange r;
  // Blocks from `tail` on end past the sequence (their last key is len_k or later).
  const std::int64_t tail = len_k / block_n;
  if (!core::masks_anything(rule)) {
    r.clear_below = 0;
    r.clear_first = 0;
    r.clear_last = int(tail) - 1;
  } else {
    r.clear_below = detail::clamp_block(rule.prefix_len / block_n, 0, tail);
    // Every row sees block n's keys [n * block_n, (n + 1) * block_n - 1] when the last row's
    // band starts at or before the first key and the first row's band ends at or after the last
    // (lo and hi never decrease with the row); hi <= len_k - 1 keeps these blocks below tail.
    r.clear_first = detail::clamp_block((last.lo + block_n - 1) / block_n, 0, tail);  // lo >= 0
    // hi + 1 <= 0 (a band ending before key 0) gives -1 whether the division truncates or floors.
    r.clear_last = detail::clamp_block((first.hi + 1) / block_n - 1, -1, tail);
  }
  if (first.lo <= last.hi && len_k > 0) {
    r.band_first = int(first.lo / block_n);
    r.band_last = int(last.hi / block_n);
  } else {
    r.band_first = 0;
    r.band_last = -1;
  }
  const std::int64_t prefix_keys = rule.prefix_len < len_k ? rule.prefix_len : len_k;
  r.prefix_last = int((prefix_keys + block_n - 1) / block_n) - 1;
  return r;
}

}  // namespace flashkit::cuda::sm80
