// Several threads hammer one BlockAllocator, each on its own sequences (create, append, fork,
// free, tables). Afterwards no page may be owned by two threads, every refcount must equal the
// number of sequences holding the page, and free + used pages must equal the pool.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "flashkit/error.hpp"
#include "flashkit/kv_cache.hpp"

namespace flashkit::testing {
namespace {

constexpr int kThreads = 4;
constexpr int kOpsPerThread = 20000;
constexpr std::int64_t kPages = 32;  // small: even one thread alone runs the pool dry
constexpr std::int64_t kPageSize = 16;

// One thread's work; returns its live sequences. Failures are counted, not asserted, since
// gtest assertions are only reliable on the main thread.
struct Worker {
  BlockAllocator* a;
  std::uint64_t seed;
  std::vector<SeqId> live;
  std::int64_t refused = 0, failures = 0;

  void run() {
    std::mt19937_64 rng(seed);
    for (int op = 0; op < kOpsPerThread; ++op) {
      const auto r = rng() % 100;
      if (live.empty() || (r < 15 && live.size() < 12)) {
        live.push_back(a->create());
        continue;
      }
      const std::size_t i = rng() % live.size();
      const SeqId s = live[i];
      if (r < 25 && live.size() < 12) {
        live.push_back(a->fork(s));
      } else if (r < 75) {
        const std::int64_t before = a->length(s);
        try {
          a->append(s, std::int64_t(1 + rng() % (2 * kPageSize)));
        } catch (const Error&) {
          ++refused;
          failures += a->length(s) != before;  // a refused append must change nothing
        }
      } else if (r < 95) {
        a->free(s);
        live[i] = live.back();
        live.pop_back();
      } else {
        const BlockTables t = a->tables(live);
        failures += t.seq_lens.size() != live.size();
      }
    }
  }
};

TEST(AllocatorThreads, DisjointSequencesKeepTheInvariants) {
  BlockAllocator a(kPages, kPageSize);
  std::vector<Worker> workers(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    workers[std::size_t(t)] = Worker{&a, 1000 + std::uint64_t(t), {}, 0, 0};
    threads.emplace_back([&w = workers[std::size_t(t)]] { w.run(); });
  }
  for (std::thread& t : threads) t.join();

  std::vector<std::int32_t> refs(kPages, 0);
  std::vector<int> owner(kPages, -1);
  std::int64_t refused = 0;
  for (int t = 0; t < kThreads; ++t) {
    const Worker& w = workers[std::size_t(t)];
    EXPECT_EQ(w.failures, 0) << "thread " << t;
    refused += w.refused;
    for (SeqId s : w.live) {
      const std::vector<PageId> pages = a.pages(s);
      EXPECT_EQ(std::int64_t(pages.size()), (a.length(s) + kPageSize - 1) / kPageSize);
      for (PageId p : pages) {
        ++refs[std::size_t(p)];
        // Threads never share sequences, so a page held by two threads was handed out twice.
        EXPECT_TRUE(owner[std::size_t(p)] == -1 || owner[std::size_t(p)] == t) << "page " << p;
        owner[std::size_t(p)] = t;
      }
    }
  }
  std::int64_t used = 0;
  for (PageId p = 0; p < kPages; ++p) {
    EXPECT_EQ(a.refcount(p), refs[std::size_t(p)]) << "page " << p;
    used += refs[std::size_t(p)] > 0;
  }
  EXPECT_EQ(a.free_pages() + used, kPages);
  EXPECT_GT(refused, 0) << "the pool never ran dry: the test did not contend for pages";
}

}  // namespace
}  // namespace flashkit::testing
