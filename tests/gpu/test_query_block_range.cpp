// Block skipping of the tensor-core backward's dK/dV kernel (bwd/query_block_range.hpp) against
// core::key_visible, element by element, on the host: every query that sees a key of the block
// lies in a visited query block, and the first and last visited blocks each hold such a query
// (the range is tight, so no work is wasted at its ends); and a query block skips the element
// mask exactly when every one of its rows sees every key of the block.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>

#include "core/mask_rules.hpp"
#include "cuda/bwd/query_block_range.hpp"
#include "random_mask_rule.hpp"

namespace flashkit::testing {
namespace {

using cuda::sm80::query_block_range;

void check(const core::MaskRule& rule, std::int64_t len_q, std::int64_t len_k, int block_m,
           int block_n) {
  const std::int64_t shift = core::diagonal_shift(rule, len_q, len_k);
  for (std::int64_t j0 = 0; j0 < len_k; j0 += block_n) {
    const std::int64_t j1 = std::min<std::int64_t>(j0 + block_n, len_k) - 1;
    const auto range = query_block_range(rule, j0, j1, len_q, len_k, block_m);
    std::int64_t first_seen = -1, last_seen = -1;
    for (std::int64_t i = 0; i < len_q; ++i) {
      for (std::int64_t j = j0; j <= j1; ++j) {
        if (!core::key_visible(rule, i + shift, j, len_k)) continue;
        if (first_seen < 0) first_seen = i;
        last_seen = i;
        ASSERT_TRUE(i / block_m >= range.first && i / block_m <= range.last)
            << "row " << i << " sees key " << j << " but its block is skipped";
      }
    }
    if (first_seen < 0) {
      ASSERT_EQ(range.count(), 0) << "keys " << j0 << ".." << j1 << " are seen by no row";
    } else {
      ASSERT_EQ(range.first, first_seen / block_m) << "keys " << j0;
      ASSERT_EQ(range.last, last_seen / block_m) << "keys " << j0;
    }
    for (std::int64_t i0 = 0; i0 < len_q; i0 += block_m) {
      bool full = true;
      for (std::int64_t i = i0; i < std::min<std::int64_t>(i0 + block_m, len_q); ++i) {
        for (std::int64_t j = j0; j <= j1; ++j)
          full = full && core::key_visible(rule, i + shift, j, len_k);
      }
      ASSERT_EQ(!range.needs_mask(int(i0 / block_m)), full)
          << "query block " << i0 / block_m << ", keys " << j0 << ".." << j1;
    }
  }
}

TEST(QueryBlockRange, VisitsEveryQueryThatSeesTheKeysAndMasksOnlyPartialBlocks) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    const core::MaskRule rule = random_mask_rule(rng);
    const std::int64_t len_q = pick(rng, 0, 300), len_k = pick(rng, 1, 300);
    SCOPED_TRACE("trial " + std::to_string(trial) + " " + describe(rule, len_q, len_k));
    check(rule, len_q, len_k, pick(rng, 0, 1) == 1 ? 32 : 64, pick(rng, 0, 1) == 1 ? 64 : 128);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace flashkit::testing
