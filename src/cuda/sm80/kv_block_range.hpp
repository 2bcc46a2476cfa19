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
  std::int64_t block_n, len_k, prefix_len;
  std::int64_t lo_last_row, hi_first_row;  // see above
  bool any_mask;                           // causal or window (core::masks_anything)

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

  // True when some (row, key) of block n is hidden or past the sequence, so scores need the
  // element-wise mask.
  FLASHKIT_HD bool needs_mask(int n) const {
    const std::int64_t k0 = n * block_n, k1 = k0 + block_n - 1;
    if (k1 >= len_k) return true;
    if (k1 < prefix_len || !any_mask) return false;
    return !(lo_last_row <= k0 && hi_first_row >= k1);
  }
};

// Rows first_row..last_row (indices within the sequence, last_row < len_q) of one query tile.
FLASHKIT_HD KvBlockRange kv_block_range(const core::MaskRule& rule, std::int64_t first_row,
                                        std::int64_t last_row, std::int64_t len_q,
                                        std::int64_t len_k, int block_n) {
  const std::int64_t shift = core::diagonal_shift(rule, len_q, len_k);
  const core::KeyBand first = core::key_band(rule, first_row + shift, len_k);
  const core::KeyBand last = core::key_band(rule, last_row + shift, len_k);
  KvBlockRange r;
  r.block_n = block_n;
  r.len_k = len_k;
  r.prefix_len = rule.prefix_len;
  r.lo_last_row = last.lo;
  r.hi_first_row = first.hi;
  r.any_mask = core::masks_anything(rule);
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
