// Which query blocks can see a block of keys: the dK/dV kernel's block skipping, the mirror of
// sm80/kv_block_range.hpp. Host and device, so tests/gpu/test_query_block_range.cpp proves it
// against core::key_visible element by element.
//
// Query i sees the band [lo(i), hi(i)] (core::key_band) plus the prefix [0, prefix_len). lo and
// hi never decrease with i, so the rows whose band meets keys [key_first, key_last] are the
// contiguous run with hi(i) >= key_first and lo(i) <= key_last: two binary searches (about 2 x 14
// key_band evaluations per CTA at 16k queries).
#pragma once

#include <cstdint>

#include "core/host_device.hpp"
#include "core/mask_rules.hpp"

namespace flashkit::cuda::sm80 {

struct QueryBlockRange {
  int first, last;  // query blocks first..last; last < first when none
  FLASHKIT_HD int count() const { return last >= first ? last - first + 1 : 0; }
};

// Keys key_first..key_last (key_last < len_k) of one sequence; query blocks of block_m rows.
FLASHKIT_HD QueryBlockRange query_block_range(const core::MaskRule& rule, std::int64_t key_first,
                                              std::int64_t key_last, std::int64_t len_q,
                                              std::int64_t len_k, int block_m) {
  if (len_q <= 0) return {0, -1};
  const int all_last = int((len_q - 1) / block_m);
  if (key_first < rule.prefix_len || !core::masks_anything(rule)) return {0, all_last};
  const std::int64_t shift = core::diagonal_shift(rule, len_q, len_k);
  // First row with hi(i) >= key_first, in [0, len_q] (len_q: none).
  std::int64_t a = 0, b = len_q;
  while (a < b) {
    const std::int64_t mid = (a + b) / 2;
    if (core::key_band(rule, mid + shift, len_k).hi >= key_first) {
      b = mid;
    } else {
      a = mid + 1;
    }
  }
  const std::int64_t first_row = a;
  // Last row with lo(i) <= key_last, in [-1, len_q - 1] (-1: none).
  a = -1;
  b = len_q - 1;
  while (a < b) {
    const std::int64_t mid = (a + b + 1) / 2;
    if (core::key_band(rule, mid + shift, len_k).lo <= key_last) {
      a = mid;
    } else {
      b = mid - 1;
    }
  }
  const std::int64_t last_row = a;
  if (first_row > last_row) return {0, -1};
  return {int(first_row / block_m), int(last_row / block_m)};
}

}  // namespace flashkit::cuda::sm80
