// BlockAllocator by example: page order, copy-on-write, both table layouts, and one test per
// misuse (each throws flashkit::Error naming the argument and changes nothing).
#include <gtest/gtest.h>

#include <vector>

#include "expect_error.hpp"
#include "flashkit/kv_cache.hpp"

namespace flashkit::testing {
namespace {

using Pages = std::vector<PageId>;

TEST(BlockAllocator, AppendTakesPagesInOrder) {
  BlockAllocator a(8, 4);
  const SeqId s = a.create();
  EXPECT_EQ(a.length(s), 0);
  EXPECT_TRUE(a.pages(s).empty());

  const AppendResult r = a.append(s, 5);  // 4 + 1 tokens: two pages
  EXPECT_EQ(r.new_pages, (Pages{0, 1}));
  EXPECT_TRUE(r.copies.empty());
  EXPECT_TRUE(a.append(s, 3).new_pages.empty());  // fills page 1 exactly
  EXPECT_EQ(a.append(s, 1).new_pages, (Pages{2}));
  EXPECT_EQ(a.length(s), 9);
  EXPECT_EQ(a.free_pages(), 5);
  EXPECT_TRUE(a.append(s, 0).new_pages.empty());

  a.free(s);
  EXPECT_EQ(a.free_pages(), 8);
  EXPECT_FALSE(a.contains(s));
  for (PageId p = 0; p < 8; ++p) EXPECT_EQ(a.refcount(p), 0);
}

TEST(BlockAllocator, ForkSharesAndCopiesAPartialLastPageOnWrite) {
  BlockAllocator a(8, 4);
  const SeqId parent = a.create();
  a.append(parent, 6);  // pages 0 (full), 1 (2 of 4 tokens)
  const SeqId child = a.fork(parent);
  EXPECT_EQ(a.pages(child), (Pages{0, 1}));
  EXPECT_EQ(a.refcount(0), 2);
  EXPECT_EQ(a.refcount(1), 2);

  // The child writes into shared page 1: it gets a copy (page 2), the parent keeps page 1.
  const AppendResult r = a.append(child, 1);
  EXPECT_EQ(r.new_pages, (Pages{2}));
  ASSERT_EQ(r.copies.size(), 1u);
  EXPECT_EQ(r.copies[0].from, 1);
  EXPECT_EQ(r.copies[0].to, 2);
  EXPECT_EQ(a.pages(child), (Pages{0, 2}));
  EXPECT_EQ(a.pages(parent), (Pages{0, 1}));
  EXPECT_EQ(a.refcount(1), 1);

  // Now page 1 is the parent's alone: written in place.
  EXPECT_TRUE(a.append(parent, 2).copies.empty());
  EXPECT_EQ(a.pages(parent), (Pages{0, 1}));
}

TEST(BlockAllocator, AFullSharedLastPageIsNotCopied) {
  BlockAllocator a(8, 4);
  const SeqId parent = a.create();
  a.append(parent, 8);
  const SeqId child = a.fork(parent);
  const AppendResult r = a.append(child, 1);
  EXPECT_TRUE(r.copies.empty());
  EXPECT_EQ(r.new_pages, (Pages{2}));
  EXPECT_EQ(a.pages(child), (Pages{0, 1, 2}));
}

TEST(BlockAllocator, PrefixFromAnExternalHolderIsCopiedOnWrite) {
  BlockAllocator a(8, 4);
  const SeqId s = a.create();
  a.append(s, 6);
  const Pages cached = a.pages(s);
  for (PageId p : cached) a.retain(p);  // a prefix cache keeps them
  a.free(s);
  EXPECT_EQ(a.free_pages(), 6);

  const SeqId t = a.create_with_prefix(cached, 6);
  EXPECT_EQ(a.refcount(1), 2);
  const AppendResult r = a.append(t, 1);
  ASSERT_EQ(r.copies.size(), 1u);
  EXPECT_EQ(r.copies[0].from, 1);
  a.free(t);
  for (PageId p : cached) a.release(p);
  EXPECT_EQ(a.free_pages(), 8);
}

TEST(BlockAllocator, TablesInBothLayouts) {
  BlockAllocator a(16, 4);
  const SeqId s0 = a.create();
  const SeqId s1 = a.create();
  const SeqId s2 = a.create();
  a.append(s0, 9);  // pages 0 1 2, last holds 1
  a.append(s1, 4);  // page 3, full
  const BlockTables t = a.tables({s0, s1, s2, s0});
  EXPECT_EQ(t.indptr, (std::vector<std::int32_t>{0, 3, 4, 4, 7}));
  EXPECT_EQ(t.indices, (std::vector<std::int32_t>{0, 1, 2, 3, 0, 1, 2}));
  EXPECT_EQ(t.last_page_len, (std::vector<std::int32_t>{1, 4, 0, 1}));
  EXPECT_EQ(t.seq_lens, (std::vector<std::int32_t>{9, 4, 0, 9}));
  EXPECT_EQ(t.max_pages, 3);
  EXPECT_EQ(t.padded, (std::vector<std::int32_t>{0, 1, 2, 3, -1, -1, -1, -1, -1, 0, 1, 2}));

  const BlockTables empty = a.tables({});
  EXPECT_EQ(empty.indptr, (std::vector<std::int32_t>{0}));
  EXPECT_EQ(empty.max_pages, 0);
  EXPECT_TRUE(empty.padded.empty());
}

TEST(BlockAllocator, EveryPowerOfTwoPageSize) {
  for (std::int64_t ps = 1; ps <= 256; ps *= 2) {
    BlockAllocator a(4, ps);
    const SeqId s = a.create();
    a.append(s, 3 * ps + 1);
    EXPECT_EQ(a.free_pages(), 0) << ps;
    EXPECT_EQ(a.tables({s}).last_page_len[0], 1) << ps;
  }
}

TEST(BlockAllocatorErrors, Construction) {
  for (std::int64_t ps : {0, -4, 3, 12, 512}) {
    expect_error([&] { BlockAllocator(8, ps); }, "page_size", "power of two");
  }
  expect_error([] { BlockAllocator(0, 16); }, "num_pages");
  expect_error([] { BlockAllocator(std::int64_t(1) << 31, 16); }, "num_pages");
}

TEST(BlockAllocatorErrors, AppendBeyondThePoolChangesNothing) {
  BlockAllocator a(4, 4);
  const SeqId s = a.create();
  a.append(s, 6);
  const SeqId child = a.fork(s);
  a.append(a.create(), 4);  // page 2; page 3 stays free
  // The child needs a copy of shared page 1 plus one more page: 2 > 1 free.
  expect_error([&] { a.append(child, 3); }, "tokens", "needs 2 pages, 1 free");
  EXPECT_EQ(a.length(child), 6);
  EXPECT_EQ(a.pages(child), (Pages{0, 1}));
  EXPECT_EQ(a.refcount(1), 2);
  EXPECT_EQ(a.free_pages(), 1);
  expect_error([&] { a.append(s, std::int64_t(1) << 62); }, "tokens");
  expect_error([&] { a.append(s, -1); }, "tokens", ">= 0");
  EXPECT_EQ(a.length(s), 6);
}

TEST(BlockAllocatorErrors, UnknownAndFreedSequences) {
  BlockAllocator a(4, 4);
  const SeqId s = a.create();
  a.free(s);
  expect_error([&] { a.free(s); }, "seq", "already freed");
  expect_error([&] { a.append(s, 1); }, "seq", "already freed");
  expect_error([&] { a.length(42); }, "seq", "never created");
  expect_error([&] { a.pages(-1); }, "seq");
  expect_error([&] { a.fork(s); }, "parent");
  const SeqId live = a.create();
  expect_error([&] { a.tables({live, s}); }, "seqs[1]");
}

TEST(BlockAllocatorErrors, Pages) {
  BlockAllocator a(4, 4);
  expect_error([&] { a.release(0); }, "page", "which is free");
  expect_error([&] { a.retain(0); }, "page", "allocated page");
  expect_error([&] { a.retain(4); }, "page", "0..3");
  expect_error([&] { a.refcount(-1); }, "page");

  const SeqId s = a.create();
  a.append(s, 8);
  expect_error([&] { a.create_with_prefix({0, 1}, 4); }, "tokens", "5..8");
  expect_error([&] { a.create_with_prefix({0, 1}, 9); }, "tokens");
  expect_error([&] { a.create_with_prefix({}, 1); }, "tokens", "0 with no pages");
  expect_error([&] { a.create_with_prefix({0, 2}, 8); }, "pages[1]", "which is free");
  expect_error([&] { a.create_with_prefix({0, 0}, 8); }, "pages[0]", "twice");
  EXPECT_EQ(a.refcount(0), 1);
  EXPECT_EQ(a.length(a.create_with_prefix({}, 0)), 0);
}

}  // namespace
}  // namespace flashkit::testing
