// A prefix cache over token ids (SGLang's RadixAttention): a radix trie whose edges own
// page-aligned runs of KV pages from a BlockAllocator. A request matches its prompt against the
// trie, reuses the matched pages (BlockAllocator::create_with_prefix), computes only the rest, and
// inserts its whole sequence back when it finishes. Pages are shared by reference counts: the trie
// holds one reference (retain) per page it keeps and drops it (release) on eviction.
//
// Everything is page-granular: an edge always holds a whole number of pages, a match is a
// multiple of page_size tokens, and a partial last page is never cached (its slots after the
// sequence's end would be garbage for a longer prompt). Nothing touches device memory, so the
// cache runs the same in a GPU server and in a simulator or test.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "flashkit/kv_cache.hpp"

namespace flashkit {
namespace detail {
struct RadixTree;  // src/cache/radix_tree.hpp
}  // namespace detail

using Token = std::int32_t;
// A namespace for cached sequences (a LoRA adapter id, a tenant): equal tokens under different
// keys never share pages, since their K/V differ.
using CacheKey = std::int64_t;

// A node of the trie: the cached prefix that ends at it. It stays valid while it is locked; an
// unlocked node may be removed by evict() (then using it throws flashkit::Error). Splitting an edge
// keeps the handle of the deeper part, so a handle always names the same prefix.
struct RadixNodeHandle {
  std::int64_t id = -1;
  bool operator==(const RadixNodeHandle& other) const { return id == other.id; }
  bool operator!=(const RadixNodeHandle& other) const { return id != other.id; }
};

struct PrefixMatch {
  RadixNodeHandle node;       // ends exactly at the match; lock it while `pages` are in use
  std::int64_t length = 0;    // matched tokens, a multiple of page_size
  std::vector<PageId> pages;  // length / page_size pages, in token order
};

struct PrefixInsert {
  RadixNodeHandle node;  // ends at the last whole page inserted
  std::int64_t cached =
      0;  // leading tokens the trie already held (its pages kept, not the caller's)
  std::int64_t inserted = 0;  // tokens newly cached after them, a multiple of page_size
};

// What an eviction policy sees of an evictable leaf.
struct NodeUsage {
  std::uint64_t last_access = 0;  // logical time of the last match or insert through the node
  std::uint64_t hits = 0;         // matches that reached the node
  std::int64_t pages = 0;
};

// Chooses the order of eviction among unlocked leaves: the smallest priority goes first (ties:
// the older node). Only leaves are candidates, since an inner node's pages are a prefix of its
// children's.
class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  virtual const char* name() const = 0;
  virtual std::pair<std::uint64_t, std::uint64_t> priority(const NodeUsage& usage) const = 0;
};

// Least recently used first (the default; SGLang's).
class LruPolicy final : public EvictionPolicy {
 public:
  const char* name() const override { return "lru"; }
  std::pair<std::uint64_t, std::uint64_t> priority(const NodeUsage& u) const override {
    return {u.last_access, 0};
  }
};

// Least frequently matched first, then least recently used: keeps a popular prefix that was not
// used in the last few requests.
class LfuPolicy final : public EvictionPolicy {
 public:
  const char* name() const override { return "lfu"; }
  std::pair<std::uint64_t, std::uint64_t> priority(const NodeUsage& u) const override {
    return {u.hits, u.last_access};
  }
};

struct RadixCacheStats {
  std::int64_t hit_tokens = 0;       // matched by match_prefix, summed over calls
  std::int64_t miss_tokens = 0;      // asked of match_prefix but not matched
  std::int64_t inserted_tokens = 0;  // newly cached by insert
  std::int64_t evicted_pages = 0;    // references released by evict
  std::int64_t evicted_nodes = 0;    // leaves removed by evict (a trimmed leaf stays)
  std::int64_t pages_held = 0;       // pages the trie references now
  std::int64_t locked_pages = 0;     // of those, pages on a locked path (not evictable)
  std::int64_t nodes = 0;            // nodes other than the per-key roots
};

// Thread safety: every public member function takes the cache's lock (and the allocator's, which
// it calls with its own held; the allocator never calls back). A handle from match_prefix may be
// evicted by another thread before it is locked: lock() then throws, and the caller matches again.
class RadixCache {
 public:
  // The allocator must outlive the cache. policy: null for LRU.
  explicit RadixCache(BlockAllocator& allocator, std::unique_ptr<EvictionPolicy> policy = nullptr);
  // Releases every page the trie still holds.
  ~RadixCache();
  RadixCache(const RadixCache&) = delete;
  RadixCache& operator=(const RadixCache&) = delete;

  std::int64_t page_size() const { return page_size_; }
  const char* policy_name() const { return policy_->name(); }

  // The longest cached page-aligned prefix of `tokens` under `key`. Splits an edge when the match
  // ends inside it, so that the returned node covers exactly the matched pages. Counts as an
  // access (recency, frequency) and in the hit/miss statistics.
  PrefixMatch match_prefix(const std::vector<Token>& tokens, CacheKey key = 0);
  // The pages match_prefix would return, without splitting, accessing or counting anything.
  std::vector<PageId> lookup(const std::vector<Token>& tokens, CacheKey key = 0) const;
  // Caches the whole pages of a sequence: `tokens` and its `pages` (floor(tokens / page_size) to
  // ceil(tokens / page_size) pages; a partial last page is ignored). The trie retains the pages
  // it keeps; the caller's references stay the caller's, and for the first `cached` tokens the
  // caller's pages are duplicates it should drop (by freeing its sequence) unless they are the
  // trie's own (a sequence made from a match).
  PrefixInsert insert(const std::vector<Token>& tokens, const std::vector<PageId>& pages,
                      CacheKey key = 0);

  // Protect the path from `node` to its root from eviction while a request uses it. Locks count:
  // each lock needs one unlock of the same node.
  void lock(RadixNodeHandle node);
  void unlock(RadixNodeHandle node);

  // Releases up to `n_pages` pages, taken from the tails of unlocked leaves in the policy's
  // order (a leaf is trimmed when it holds more than is still needed); removes emptied leaves and
  // merges a parent left with one child into it. Returns the pages released: fewer than asked only
  // when nothing else is evictable. A released page returns to the free list unless a live
  // sequence still shares it.
  std::int64_t evict(std::int64_t n_pages);
  std::int64_t evictable_pages() const;  // pages_held - locked_pages

  RadixCacheStats stats() const;
  // Every page the trie references, ascending: for audits against the allocator's refcounts.
  std::vector<PageId> held_pages() const;

 private:
  BlockAllocator& allocator_;
  std::int64_t page_size_;
  std::unique_ptr<EvictionPolicy> policy_;
  std::unique_ptr<detail::RadixTree> tree_;
  mutable std::mutex mutex_;
};

}  // namespace flashkit
