// Which chunk pairs of a ring meet under a mask (dist::chunks_meet, which decides the calls a
// step runs) and which see every key (dist::pair_sees_everything, which drops the mask), against
// a brute force over every (query, key) pair of the two chunks: random masks (causal or not,
// windows of either side from none to wider than a chunk, prefix-LM) and chunks of both layouts.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>

#include "core/mask_rules.hpp"
#include "dist/ring_plan.hpp"

namespace flashkit::testing {
namespace {

struct Brute {
  bool any = false, all = true;
};

Brute brute_force(const core::MaskRule& rule, const dist::Chunk& q, const dist::Chunk& kv,
                  std::int64_t total) {
  Brute b;
  for (std::int64_t i = q.first_token(); i < q.first_token() + q.len; ++i) {
    for (std::int64_t j = kv.first_token(); j < kv.first_token() + kv.len; ++j) {
      const bool seen = core::key_visible(rule, i, j, total);
      b.any = b.any || seen;
      b.all = b.all && seen;
    }
  }
  return b;
}

TEST(RingPlan, ChunkPairsMeetExactlyWhenSomeQuerySeesSomeKey) {
  std::mt19937 rng(5);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int met = 0, apart = 0, whole = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const int ranks = pick(1, 5);
    const std::int64_t local = 2 * pick(1, 12);
    const std::int64_t total = local * ranks;
    core::MaskRule rule;
    rule.causal = pick(0, 1) == 1;
    rule.window_left = pick(0, 2) == 0 ? -1 : pick(0, int(local) * 2);
    rule.window_right = pick(0, 2) == 0 ? -1 : pick(0, int(local) * 2);
    rule.prefix_len = pick(0, 3) == 0 ? pick(0, int(total)) : 0;
    const RingLayout layout = pick(0, 1) ? RingLayout::zigzag : RingLayout::contiguous;
    const int rank = pick(0, ranks - 1), source = pick(0, ranks - 1);
    for (const dist::Chunk& q : dist::shard_chunks(layout, ranks, rank, local)) {
      for (const dist::Chunk& kv : dist::shard_chunks(layout, ranks, source, local)) {
        const Brute want = brute_force(rule, q, kv, total);
        ASSERT_EQ(dist::chunks_meet(rule, q, kv, total), want.any)
            << "trial " << trial << ": q chunk " << q.global << " kv chunk " << kv.global;
        ASSERT_EQ(dist::pair_sees_everything(rule, false, q, kv, total), want.all)
            << "trial " << trial << ": q chunk " << q.global << " kv chunk " << kv.global;
        met += want.any;
        apart += !want.any;
        whole += want.all;
      }
    }
  }
  // The random masks reach every outcome often, so each comparison above was tested both ways.
  EXPECT_GT(met, 1000);
  EXPECT_GT(apart, 1000);
  EXPECT_GT(whole, 500);
}

}  // namespace
}  // namespace flashkit::testing
