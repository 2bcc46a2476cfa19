// RadixCache by example: edge splits, namespaces, LRU against LFU order, locked paths, merges
// after eviction, and one test per misuse.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "expect_error.hpp"
#include "flashkit/radix_cache.hpp"

namespace flashkit::testing {
namespace {

using Pages = std::vector<PageId>;
using Tokens = std::vector<Token>;

// A sequence of `tokens` in fresh pages, inserted into the cache and then freed, as a finished
// request would be. Returns the pages the trie now holds for it.
Pages cache_sequence(BlockAllocator& a, RadixCache& c, const Tokens& tokens, CacheKey key = 0) {
  const SeqId s = a.create();
  a.append(s, std::int64_t(tokens.size()));
  const Pages pages = a.pages(s);
  c.insert(tokens, pages, key);
  a.free(s);
  return pages;
}

TEST(RadixCache, MatchIsPageAligned) {
  BlockAllocator a(16, 4);
  RadixCache c(a);
  const Pages pages = cache_sequence(a, c, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10});  // 2 whole pages + 2
  EXPECT_EQ(c.stats().pages_held, 2);
  EXPECT_EQ(a.free_pages(), 14) << "the partial third page is not cached";

  const PrefixMatch m = c.match_prefix({1, 2, 3, 4, 5, 6, 7, 99, 9});
  EXPECT_EQ(m.length, 4);  // the second page differs in its last token
  EXPECT_EQ(m.pages, (Pages{pages[0]}));
  EXPECT_EQ(c.match_prefix({1, 2, 3}).length, 0);
  EXPECT_EQ(c.match_prefix({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}).length, 8);
  EXPECT_EQ(c.stats().hit_tokens, 4 + 0 + 8);
  EXPECT_EQ(c.stats().miss_tokens, 5 + 3 + 4);
}

TEST(RadixCache, InsertSplitsAnEdgeAndReportsTheCachedPart) {
  BlockAllocator a(32, 2);
  RadixCache c(a);
  const Pages first = cache_sequence(a, c, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(c.stats().nodes, 1);

  const SeqId s = a.create();
  a.append(s, 6);
  const PrefixInsert r = c.insert({1, 2, 3, 4, 9, 9}, a.pages(s));
  EXPECT_EQ(r.cached, 4);
  EXPECT_EQ(r.inserted, 2);
  EXPECT_EQ(c.stats().nodes, 3) << "[1 2 3 4] split off, with leaves [5 6] and [9 9]";
  // The trie kept its own pages for the shared part and took only the new page of s.
  EXPECT_EQ(a.refcount(a.pages(s)[0]), 1);
  EXPECT_EQ(a.refcount(a.pages(s)[2]), 2);
  a.free(s);

  EXPECT_EQ(c.match_prefix({1, 2, 3, 4, 5, 6}).pages, first);
  EXPECT_EQ(c.match_prefix({1, 2, 3, 4, 9, 9, 7}).length, 6);
  // A match ending inside an edge splits it, so its node covers exactly the match.
  const PrefixMatch m = c.match_prefix({1, 2, 7, 7});
  EXPECT_EQ(m.length, 2);
  EXPECT_EQ(c.stats().nodes, 4);
  c.lock(m.node);
  EXPECT_EQ(c.stats().locked_pages, 1);
  c.unlock(m.node);

  EXPECT_EQ(c.insert({1, 2, 3, 4, 5, 6}, first).cached, 6) << "already cached: nothing new";
  EXPECT_EQ(c.stats().inserted_tokens, 6 + 2);
}

TEST(RadixCache, PagesWithEqualFirstTokensAreDifferentChildren) {
  BlockAllocator a(16, 4);
  RadixCache c(a);
  cache_sequence(a, c, {1, 2, 3, 4});
  cache_sequence(a, c, {1, 2, 3, 5});
  EXPECT_EQ(c.stats().nodes, 2);
  EXPECT_EQ(c.match_prefix({1, 2, 3, 5}).length, 4);
  EXPECT_EQ(c.match_prefix({1, 2, 3, 6}).length, 0);
}

TEST(RadixCache, KeysNeverShare) {
  BlockAllocator a(16, 2);
  RadixCache c(a);
  const Pages under0 = cache_sequence(a, c, {1, 2, 3, 4}, 0);
  EXPECT_EQ(c.match_prefix({1, 2, 3, 4}, 7).length, 0);
  const Pages under7 = cache_sequence(a, c, {1, 2, 3, 4}, 7);
  EXPECT_EQ(c.match_prefix({1, 2, 3, 4}, 0).pages, under0);
  EXPECT_EQ(c.match_prefix({1, 2, 3, 4}, 7).pages, under7);
  EXPECT_EQ(c.stats().pages_held, 4);
}

// Three cached sequences; A is matched three times long ago, B once recently, C never.
// Under LRU C (older than B's match) then A go first; under LFU C then B.
void use_abc(BlockAllocator& a, RadixCache& c) {
  cache_sequence(a, c, {1, 1});
  cache_sequence(a, c, {2, 2});
  cache_sequence(a, c, {3, 3});
  for (int i = 0; i < 3; ++i) c.match_prefix({1, 1});
  c.match_prefix({2, 2});
}

TEST(RadixCache, LruEvictsTheLeastRecentlyUsed) {
  BlockAllocator a(8, 2);
  RadixCache c(a);
  use_abc(a, c);
  EXPECT_STREQ(c.policy_name(), "lru");
  EXPECT_EQ(c.evict(2), 2);
  EXPECT_EQ(c.match_prefix({2, 2}).length, 2);
  EXPECT_EQ(c.match_prefix({1, 1}).length, 0);
  EXPECT_EQ(c.match_prefix({3, 3}).length, 0);
}

TEST(RadixCache, LfuEvictsTheLeastFrequentlyUsed) {
  BlockAllocator a(8, 2);
  RadixCache c(a, std::make_unique<LfuPolicy>());
  use_abc(a, c);
  EXPECT_STREQ(c.policy_name(), "lfu");
  EXPECT_EQ(c.evict(2), 2);
  EXPECT_EQ(c.match_prefix({1, 1}).length, 2);
  EXPECT_EQ(c.match_prefix({2, 2}).length, 0);
}

TEST(RadixCache, EvictNeverTouchesALockedPath) {
  BlockAllocator a(32, 1);
  RadixCache c(a);
  cache_sequence(a, c, {1, 2, 3, 4});
  cache_sequence(a, c, {1, 2, 5, 6});
  cache_sequence(a, c, {7, 8});
  const PrefixMatch m = c.match_prefix({1, 2, 3, 4});
  c.lock(m.node);
  c.lock(m.node);  // locks count
  EXPECT_EQ(c.stats().locked_pages, 4);
  EXPECT_EQ(c.evictable_pages(), 4);

  EXPECT_EQ(c.evict(100), 4) << "only [5 6] and [7 8] are evictable";
  EXPECT_EQ(c.lookup({1, 2, 3, 4}), m.pages);
  EXPECT_TRUE(c.lookup({7, 8}).empty());
  EXPECT_EQ(c.evict(1), 0);

  c.unlock(m.node);
  EXPECT_EQ(c.evict(1), 0) << "still locked once";
  c.unlock(m.node);
  EXPECT_EQ(c.stats().locked_pages, 0);
  EXPECT_EQ(c.evict(100), 4);
  EXPECT_EQ(c.stats().pages_held, 0);
  EXPECT_EQ(c.stats().nodes, 0);
  EXPECT_EQ(a.free_pages(), 32);
}

TEST(RadixCache, EvictTrimsALeafAndMergesAParentLeftWithOneChild) {
  BlockAllocator a(32, 1);
  RadixCache c(a);
  cache_sequence(a, c, {1, 2, 3, 4});
  cache_sequence(a, c, {1, 2, 5, 6, 7});  // [1 2] -> {[3 4], [5 6 7]}
  c.match_prefix({1, 2, 5, 6, 7});        // [3 4] is the least recent leaf
  EXPECT_EQ(c.stats().nodes, 3);

  EXPECT_EQ(c.evict(1), 1) << "the tail of [3 4] only";
  EXPECT_EQ(c.lookup({1, 2, 3, 4}).size(), 3u);
  EXPECT_EQ(c.evict(1), 1);
  EXPECT_EQ(c.stats().nodes, 1) << "[1 2] merged into [5 6 7]";
  EXPECT_EQ(c.lookup({1, 2, 5, 6, 7}).size(), 5u);
  EXPECT_EQ(c.stats().evicted_pages, 2);
  EXPECT_EQ(c.stats().evicted_nodes, 1);
}

TEST(RadixCache, HandlesSurviveSplitsButNotEviction) {
  BlockAllocator a(16, 1);
  RadixCache c(a);
  cache_sequence(a, c, {1, 2, 3});
  const PrefixMatch whole = c.match_prefix({1, 2, 3});
  c.match_prefix({1, 2});  // splits [1 2 3]; `whole` still names [1 2 3]
  c.lock(whole.node);
  EXPECT_EQ(c.stats().locked_pages, 3);
  c.unlock(whole.node);
  c.evict(3);
  expect_error([&] { c.lock(whole.node); }, "node", "evicted");
}

TEST(RadixCache, DestructionReleasesEveryPage) {
  BlockAllocator a(16, 2);
  {
    RadixCache c(a);
    cache_sequence(a, c, {1, 2, 3, 4, 5, 6});
    EXPECT_EQ(a.free_pages(), 13);
  }
  EXPECT_EQ(a.free_pages(), 16);
}

TEST(RadixCacheErrors, Misuse) {
  BlockAllocator a(16, 2);
  RadixCache c(a);
  const SeqId s = a.create();
  a.append(s, 5);
  const Pages pages = a.pages(s);  // 3 pages, the last partial
  expect_error([&] { c.insert({1, 2, 3, 4, 5}, {pages[0]}); }, "pages", "2..3 pages");
  expect_error([&] { c.insert({1, 2}, {15}); }, "pages[0]", "(free)");
  expect_error([&] { c.insert({1, 2}, {16}); }, "pages[0]", "0..15");
  expect_error([&] { c.insert({1, 2, 3, 4}, {pages[0], pages[0]}); }, "pages", "twice");
  c.insert({1, 2, 3, 4, 5}, pages);
  expect_error([&] { c.insert({7, 7}, {pages[0]}); }, "pages[0]", "another prefix");
  expect_error([&] { c.evict(-1); }, "n_pages");
  expect_error([&] { c.lock(RadixNodeHandle{12345}); }, "node", "never existed");

  const PrefixMatch m = c.match_prefix({1, 2, 3, 4});
  expect_error([&] { c.unlock(m.node); }, "node", "no lock of its own");
  const PrefixMatch shorter = c.match_prefix({1, 2});
  c.lock(m.node);  // locks the path through `shorter`, but not `shorter` itself
  expect_error([&] { c.unlock(shorter.node); }, "node");
  c.unlock(m.node);
  EXPECT_EQ(c.stats().pages_held, 2) << "nothing changed by the failed calls";
  a.free(s);
}

}  // namespace
}  // namespace flashkit::testing
