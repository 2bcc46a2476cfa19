// Which columns of a block of scores one query row may see, in the form the forwards' mask code
// tests per element (sm80/fwd_softmax.cuh, apply_mask). core::key_visible(j) is "j < prefix_len
// or j in key_band(row)"; block-relative, "j < pre or lo <= j <= hi". Tested as
// "j <= hi, and unless the row's columns run from the block's start, j >= lo or j < pre": causal
// rows, windows past their first block and a prefix that reaches the window run from the start
// and need one compare an element; the rest a second pass of two.
#pragma once

#include "core/mask_rules.hpp"

namespace flashkit::cuda::sm80 {

struct RowColumns {
  bool from_start;  // every visible column is at or before hi: no lower bound to test
  int lo, hi, pre;
};

// lo, hi: the row's key band and pre the prefix length, all relative to the block's column 0.
FLASHKIT_HD constexpr RowColumns row_columns(int lo, int hi, int pre) {
  if (pre > 0 && (lo <= pre || hi < lo)) {
    // [0, pre) and [lo, hi] meet, or the band is empty: one run [0, max(pre - 1, hi)].
    return {true, 0, hi >= lo && hi > pre - 1 ? hi : pre - 1, 0};
  }
  // pre <= 0: the band alone; else a prefix, a gap and the band (pre < lo <= hi).
  return {lo <= 0, lo, hi, pre};
}

// The two passes' compares for column j (>= 0), each against a constant in the kernels' unrolled
// loops, combined bitwise (with && and || the compiler branched per element).
FLASHKIT_HD constexpr bool row_sees_upto(const RowColumns& r, int j) {
  return j <= r.hi;
}
FLASHKIT_HD constexpr bool row_sees_from(const RowColumns& r, int j) {
  return (j >= r.lo) | (j < r.pre);
}
FLASHKIT_HD constexpr bool row_sees(const RowColumns& r, int j) {
  return row_sees_upto(r, j) && (r.from_start || row_sees_from(r, j));
}

}  // namespace flashkit::cuda::sm80
