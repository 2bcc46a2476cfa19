// Causal / window / prefix-LM block skipping of the sm80 forward (sm80/kv_block_range.hpp)
// against core::key_visible, element by element, on the host: every visible key's block is
// visited exactly once, in descending order, and a block is left unmasked only when every row of
// the tile sees every key of it; count() is the walk's length. The mask test is also held to its
// exact rule (unmasked exactly when the block lies below the prefix's and the sequence's ends, or
// inside every row's band), so a cheaper form cannot mask fewer or more blocks than it should.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <string>

#include "core/mask_rules.hpp"
#include "cuda/sm80/kv_block_range.hpp"
#include "random_mask_rule.hpp"

namespace flashkit::testing {
namespace {

using cuda::sm80::kv_block_range;

void check(const core::MaskRule& rule, std::int64_t len_q, std::int64_t len_k, int block_m,
           int block_n) {
  const std::int64_t shift = core::diagonal_shift(rule, len_q, len_k);
  for (std::int64_t m0 = 0; m0 < len_q; m0 += block_m) {
    const std::int64_t m1 = std::min(m0 + block_m, len_q) - 1;
    const auto range = kv_block_range(rule, m0, m1, len_q, len_k, block_n);
    std::set<int> visited;
    int prev = 1 << 30, walked = 0;
    for (int n = range.first(); n >= 0; n = range.next(n)) {
      ASSERT_LT(n, prev) << "blocks must strictly descend";
      ASSERT_LT(std::int64_t(n) * block_n, len_k) << "block past the keys";
      prev = n;
      ++walked;
      visited.insert(n);
      bool all_visible = true;
      for (std::int64_t i = m0; i <= m1; ++i) {
        for (std::int64_t j = std::int64_t(n) * block_n; j < std::int64_t(n + 1) * block_n; ++j) {
          all_visible = all_visible && j < len_k && core::key_visible(rule, i + shift, j, len_k);
        }
      }
      if (!range.needs_mask(n)) {
        ASSERT_TRUE(all_visible) << "block " << n << " rows " << m0;
      }
      const std::int64_t k0 = std::int64_t(n) * block_n, k1 = k0 + block_n - 1;
      bool inside_bands = k1 < len_k;
      for (std::int64_t i = m0; i <= m1; ++i) {
        const core::KeyBand band = core::key_band(rule, i + shift, len_k);
        inside_bands = inside_bands && band.lo <= k0 && band.hi >= k1;
      }
      const bool below_prefix = k1 < rule.prefix_len && k1 < len_k;
      ASSERT_EQ(range.needs_mask(n), !(below_prefix || inside_bands))
          << "block " << n << " rows " << m0;
    }
    ASSERT_EQ(range.count(), walked) << "rows " << m0;
    for (std::int64_t i = m0; i <= m1; ++i) {
      for (std::int64_t j = 0; j < len_k; ++j) {
        if (core::key_visible(rule, i + shift, j, len_k)) {
          ASSERT_TRUE(visited.count(int(j / block_n)))
              << "row " << i << " key " << j << " in a skipped block";
        }
      }
    }
  }
}

TEST(KvBlockRange, VisitsEveryVisibleKeyAndMasksEveryPartialBlock) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 400; ++trial) {
    const core::MaskRule rule = random_mask_rule(rng);
    const std::int64_t len_q = pick(rng, 1, 300), len_k = pick(rng, 0, 300);
    SCOPED_TRACE("trial " + std::to_string(trial) + " " + describe(rule, len_q, len_k));
    // The sm80 kernels' 64- and 128-key blocks and the sm90 kernels' 80 and 176.
    constexpr int kBlockN[] = {64, 80, 128, 176};
    check(rule, len_q, len_k, 128, kBlockN[pick(rng, 0, 3)]);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// Every diagonal position against the block edges: the random rules above meet a band that ends
// (or starts) one key inside a block only a few times in thousands of draws, the cases an
// off-by-one in the mask test gets wrong.
TEST(KvBlockRange, MasksEveryBlockEdgeTheDiagonalCanMeet) {
  for (int offset = -130; offset <= 130; ++offset) {
    for (const int left : {-1, 7}) {        // no left window, or one of 7 keys
      for (const int reach : {-1, 0, 5}) {  // causal, or a right window of 0 or 5 keys
        core::MaskRule rule;
        rule.causal = reach < 0;
        rule.window_left = left;
        rule.window_right = reach < 0 ? -1 : reach;
        rule.diagonal_offset = offset;
        SCOPED_TRACE(describe(rule, 150, 200));
        check(rule, 150, 200, 64, 64);
        check(rule, 150, 200, 128, 80);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

// Every prefix length against the block edges (a prefix ending one key inside or past a block).
TEST(KvBlockRange, MasksEveryBlockEdgeThePrefixCanMeet) {
  for (int prefix = 1; prefix <= 200; ++prefix) {
    for (const int offset : {-120, 0}) {  // the diagonal left of or through the keys
      core::MaskRule rule;
      rule.causal = true;
      rule.prefix_len = prefix;
      rule.diagonal_offset = offset;
      SCOPED_TRACE(describe(rule, 150, 200));
      check(rule, 150, 200, 64, 64);
      check(rule, 150, 200, 128, 80);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

}  // namespace
}  // namespace flashkit::testing
