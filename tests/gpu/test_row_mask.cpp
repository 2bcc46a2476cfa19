// The forwards' per-row mask passes (sm80/row_mask.hpp) against the rule they replace, "j < pre
// or lo <= j <= hi", on the host: exhaustively over small bounds, then at random over a block's
// range; both at the row's own columns and moved to a thread's column base, as apply_mask tests
// them.
#include <gtest/gtest.h>

#include <random>

#include "cuda/sm80/row_mask.hpp"

namespace flashkit::testing {
namespace {

using cuda::sm80::row_columns;
using cuda::sm80::row_sees;
using cuda::sm80::row_sees_upto;
using cuda::sm80::RowColumns;

bool rule_sees(int lo, int hi, int pre, int j) {
  return j < pre || (j >= lo && j <= hi);
}

void check(int lo, int hi, int pre, int columns) {
  const RowColumns r = row_columns(lo, hi, pre);
  for (int base = 0; base < 8; base += 2) {
    RowColumns moved = r;
    moved.lo -= base;
    moved.hi -= base;
    moved.pre -= base;
    for (int j = base; j < columns; ++j) {
      ASSERT_EQ(row_sees(moved, j - base), rule_sees(lo, hi, pre, j))
          << "lo " << lo << " hi " << hi << " pre " << pre << " j " << j << " base " << base
          << " from start " << r.from_start;
    }
  }
}

TEST(RowMask, EveryFormAgreesWithTheRuleOnSmallBounds) {
  for (int lo = -20; lo <= 40; ++lo)
    for (int hi = -20; hi <= 40; ++hi)
      for (int pre = -20; pre <= 40; ++pre) check(lo, hi, pre, 32);
}

TEST(RowMask, EveryFormAgreesWithTheRuleOnBlockSizedBounds) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> bound(-400, 400);
  for (int trial = 0; trial < 20000; ++trial) check(bound(rng), bound(rng), bound(rng), 256);
}

TEST(RowMask, RowsThatRunFromTheStartNeedOnePass) {
  EXPECT_TRUE(row_columns(-128, 17, -128).from_start);  // causal, the band begun before
  EXPECT_TRUE(row_columns(0, 17, 0).from_start);
  EXPECT_TRUE(row_columns(30, 90, 40).from_start);   // a prefix reaching the window
  EXPECT_TRUE(row_columns(30, 20, 10).from_start);   // empty band: the prefix alone
  EXPECT_FALSE(row_columns(30, 90, 0).from_start);   // a window starting in the block
  EXPECT_FALSE(row_columns(30, 90, 10).from_start);  // prefix, gap, window
  // The first pass alone is the whole test where the row runs from the start.
  for (int j = 0; j < 64; ++j) {
    const RowColumns r = row_columns(30, 50, 40);
    EXPECT_EQ(row_sees_upto(r, j), j <= 50) << j;
  }
}

}  // namespace
}  // namespace flashkit::testing
