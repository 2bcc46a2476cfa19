// Which query blocks can see a block of keys: the dK/dV kernel's block skipping, the mirror of
// sm80/kv_block_range.hpp. Host and device, so tests/gpu/test_query_block_range.cpp proves it
// against core::key_visible element by element.
//
// Query i sees the band [lo(i), hi(i)] (core::key_band) plus the prefix [0, prefix_len). On the
// diagonal d = i + shift the band is lo = max(0, d - window_left) and hi = min(len_k - 1, d +
// reach), reach being 0 under causal, else window_right (either limit absent when its window is
// -1), so the rows whose band meets keys [key_first, key_last] (hi(i) >= key_first and lo(i) <=
// key_last) and those that see every key of the block (the same with the ends swapped) follow in
// closed form. A binary search per bound instead cost ~40 dependent iterations of 64-bit
// arithmetic at 512 queries (~1.6 us), paid by every CTA before its first copy.
#pragma once

#include <cstdint>

#include "core/host_device.hpp"
#include "core/mask_rules.hpp"

namespace flashkit::cuda::sm80 {

struct QueryBlockRange {
  int first, last;            // query blocks first..last; last < first when none
  int full_first, full_last;  // blocks each of whose rows sees every key of the key block
  FLASHKIT_HD int count() const { return last >= first ? last - first + 1 : 0; }
  // True when some row of query block m may not see some key of the block (keys past the
  // sequence aside: the caller adds those).
  FLASHKIT_HD bool needs_mask(int m) const { return m < full_first || m > full_last; }
};

namespace detail {

// First row i in [0, len_q] with hi(i) >= key (len_q: none).
FLASHKIT_HD std::int64_t first_row_reaching(const core::MaskRule& rule, std::int64_t key,
                                            std::int64_t shift, std::int64_t len_q,
                                            std::int64_t len_k) {
  if (key > len_k - 1) return len_q;
  if (!rule.causal && rule.window_right < 0) return 0;
  const std::int64_t reach = rule.causal ? 0 : rule.window_right;
  const std::int64_t row = key - shift - reach;
  return row < 0 ? 0 : row > len_q ? len_q : row;
}

// Last row i in [-1, len_q - 1] with lo(i) <= key (-1: none).
FLASHKIT_HD std::int64_t last_row_reaching(const core::MaskRule& rule, std::int64_t key,
                                           std::int64_t shift, std::int64_t len_q) {
  if (key < 0) return -1;
  if (rule.window_left < 0) return len_q - 1;
  const std::int64_t row = key + rule.window_left - shift;
  return row < -1 ? -1 : row > len_q - 1 ? len_q - 1 : row;
}

}  // namespace detail

// Keys key_first..key_last (key_last < len_k) of one sequence; query blocks of block_m rows.
FLASHKIT_HD QueryBlockRange query_block_range(const core::MaskRule& rule, std::int64_t key_first,
                                              std::int64_t key_last, std::int64_t len_q,
                                              std::int64_t len_k, int block_m) {
  if (len_q <= 0) return {0, -1, 0, -1};
  const int all_last = int((len_q - 1) / block_m);
  if (key_last < rule.prefix_len || !core::masks_anything(rule)) return {0, all_last, 0, all_last};
  QueryBlockRange r{0, all_last, 0, all_last};
  const std::int64_t shift = core::diagonal_shift(rule, len_q, len_k);
  if (key_first >= rule.prefix_len) {
    // Rows that see some key: hi(i) >= key_first and lo(i) <= key_last.
    const std::int64_t first_row = detail::first_row_reaching(rule, key_first, shift, len_q, len_k);
    const std::int64_t last_row = detail::last_row_reaching(rule, key_last, shift, len_q);
    if (first_row > last_row) return {0, -1, 0, -1};
    r.first = int(first_row / block_m);
    r.last = int(last_row / block_m);
  }
  // Rows that see every key: the prefix covers keys below prefix_len, so the band must reach
  // from max(key_first, prefix_len) to key_last. A block is full when all its rows (those below
  // len_q) are.
  const std::int64_t lo_key = key_first > rule.prefix_len ? key_first : rule.prefix_len;
  const std::int64_t full_a = detail::first_row_reaching(rule, key_last, shift, len_q, len_k);
  const std::int64_t full_b = detail::last_row_reaching(rule, lo_key, shift, len_q);
  r.full_first = int((full_a + block_m - 1) / block_m);
  r.full_last = full_b == len_q - 1 ? all_last : int((full_b + 1) / block_m) - 1;
  return r;
}

}  // namespace flashkit::cuda::sm80
