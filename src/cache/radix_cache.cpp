// RadixCache's public calls: argument checks (all before the first change), the cache's lock,
// access times and statistics around the trie operations of radix_tree.cpp.
#include "flashkit/radix_cache.hpp"

#include <algorithm>
#include <queue>
#include <string>
#include <utility>

#include "cache/radix_tree.hpp"
#include "flashkit/error.hpp"

namespace flashkit {
namespace {

using Lock = std::lock_guard<std::mutex>;
using Node = detail::RadixTree::Node;

std::string num(std::int64_t v) {
  return std::to_string(v);
}

// Marks the path from `node` to its root as used now.
void touch(detail::RadixTree& t, Node* node, bool hit) {
  ++t.clock;
  detail::RadixTree::for_path(node, [&](Node& n) {
    n.last_access = t.clock;
    if (hit) ++n.hits;
  });
}

}  // namespace

RadixCache::RadixCache(BlockAllocator& allocator, std::unique_ptr<EvictionPolicy> policy)
    : allocator_(allocator),
      page_size_(allocator.page_size()),
      policy_(policy ? std::move(policy) : std::make_unique<LruPolicy>()),
      tree_(std::make_unique<detail::RadixTree>(allocator, page_size_)) {}

RadixCache::~RadixCache() = default;

PrefixMatch RadixCache::match_prefix(const std::vector<Token>& tokens, CacheKey key) {
  const Lock lock(mutex_);
  detail::RadixTree& t = *tree_;
  const detail::RadixTree::Walk w = t.walk(t.root(key), tokens);
  PrefixMatch m;
  m.length = w.length;
  t.walk_pages(w, m.pages);
  // A match ending inside an edge gets its own node, so that locking it protects exactly the
  // matched pages and nothing that the request does not use.
  Node* end = w.next != nullptr ? t.split(w.next, w.partial) : w.node;
  m.node.id = end->id;
  touch(t, end, true);
  t.stats.hit_tokens += m.length;
  t.stats.miss_tokens += std::int64_t(tokens.size()) - m.length;
  return m;
}

std::vector<PageId> RadixCache::lookup(const std::vector<Token>& tokens, CacheKey key) const {
  const Lock lock(mutex_);
  std::vector<PageId> pages;
  if (const Node* root = tree_->find_root(key)) tree_->walk_pages(tree_->walk(root, tokens), pages);
  return pages;
}

PrefixInsert RadixCache::insert(const std::vector<Token>& tokens, const std::vector<PageId>& pages,
                                CacheKey key) {
  const Lock lock(mutex_);
  detail::RadixTree& t = *tree_;
  const auto n = std::int64_t(tokens.size());
  const std::int64_t full = n / page_size_;
  const std::int64_t all = (n + page_size_ - 1) / page_size_;
  if (std::int64_t(pages.size()) < full || std::int64_t(pages.size()) > all) {
    throw Error("pages",
                num(full) + ".." + num(all) + " pages for " + num(n) + " tokens of page size " +
                    num(page_size_),
                num(std::int64_t(pages.size())) + " pages");
  }
  for (std::int64_t i = 0; i < full; ++i) {
    const PageId p = pages[std::size_t(i)];
    if (p < 0 || p >= allocator_.num_pages() || allocator_.refcount(p) == 0) {
      throw Error("pages[" + num(i) + "]",
                  "an allocated page id in 0.." + num(allocator_.num_pages() - 1),
                  "page " + num(p) + (p >= 0 && p < allocator_.num_pages() ? " (free)" : ""));
    }
  }
  std::vector<PageId> sorted(pages.begin(), pages.begin() + full);
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    throw Error("pages", "distinct pages (each holds one token range)", "a page listed twice");
  }

  Node* const root = t.root(key);
  const detail::RadixTree::Walk w = t.walk(root, tokens);
  // The new part's pages must be new to the trie: one page cannot cache two token ranges.
  for (std::int64_t i = w.length / page_size_; i < full; ++i) {
    if (t.held[std::size_t(pages[std::size_t(i)])]) {
      throw Error("pages[" + num(i) + "]", "a page the cache does not hold yet",
                  "page " + num(pages[std::size_t(i)]) + ", cached for another prefix");
    }
  }

  Node* node = w.next != nullptr ? t.split(w.next, w.partial) : w.node;
  if (w.length < full * page_size_)
    node = t.add_leaf(node, tokens, pages, w.length, full * page_size_);
  touch(t, node, false);
  t.stats.inserted_tokens += full * page_size_ - w.length;
  return PrefixInsert{RadixNodeHandle{node->id}, w.length, full * page_size_ - w.length};
}

void RadixCache::lock(RadixNodeHandle handle) {
  const Lock guard(mutex_);
  detail::RadixTree& t = *tree_;
  Node* node = t.find(handle, "node");
  ++node->own_locks;
  detail::RadixTree::for_path(node, [&](Node& n) {
    if (n.lock++ == 0) t.stats.locked_pages += std::int64_t(n.pages.size());
  });
}

void RadixCache::unlock(RadixNodeHandle handle) {
  const Lock guard(mutex_);
  detail::RadixTree& t = *tree_;
  Node* node = t.find(handle, "node");
  // Checked against the node's own locks: a lock taken on a descendant is not this node's to drop.
  if (node->own_locks == 0) {
    throw Error("node", "a node locked through this handle",
                "node " + num(handle.id) + ", which holds no lock of its own");
  }
  --node->own_locks;
  detail::RadixTree::for_path(node, [&](Node& n) {
    if (--n.lock == 0) t.stats.locked_pages -= std::int64_t(n.pages.size());
  });
}

std::int64_t RadixCache::evict(std::int64_t n_pages) {
  const Lock lock(mutex_);
  if (n_pages < 0) throw Error("n_pages", "a count >= 0", num(n_pages));
  detail::RadixTree& t = *tree_;

  struct Candidate {
    std::pair<std::uint64_t, std::uint64_t> priority;
    std::int64_t id;  // ties: the older node first, so the order never depends on hashing
    Node* node;
    bool operator>(const Candidate& o) const {
      return priority != o.priority ? priority > o.priority : id > o.id;
    }
  };
  auto candidate = [&](Node* n) {
    const NodeUsage usage{n->last_access, n->hits, std::int64_t(n->pages.size())};
    return Candidate{policy_->priority(usage), n->id, n};
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> leaves;
  for (const auto& entry : t.nodes) {
    Node* n = entry.second.get();
    if (n->parent != nullptr && n->children.empty() && n->lock == 0) leaves.push(candidate(n));
  }

  std::int64_t released = 0;
  while (released < n_pages && !leaves.empty()) {
    Node* leaf = leaves.top().node;
    leaves.pop();
    Node* parent = leaf->parent;
    const auto edge = std::int64_t(leaf->pages.size());
    const std::int64_t take = std::min(edge, n_pages - released);
    t.trim_leaf(leaf, take);  // a leaf's tail pages are its least shared ones
    released += take;
    if (take < edge) break;
    ++t.stats.evicted_nodes;
    if (parent->parent == nullptr || parent->lock != 0) continue;
    if (parent->children.empty()) {
      leaves.push(candidate(parent));
    } else if (parent->children.size() == 1) {
      t.merge_into_child(parent);  // an unlocked inner node with one child only splits an edge
    }
  }
  t.stats.evicted_pages += released;
  return released;
}

std::int64_t RadixCache::evictable_pages() const {
  const Lock lock(mutex_);
  // Locks cover whole paths to the root, so everything outside a locked path is evictable.
  return tree_->stats.pages_held - tree_->stats.locked_pages;
}

RadixCacheStats RadixCache::stats() const {
  const Lock lock(mutex_);
  return tree_->stats;
}

std::vector<PageId> RadixCache::held_pages() const {
  const Lock lock(mutex_);
  std::vector<PageId> pages;
  for (std::size_t p = 0; p < tree_->held.size(); ++p) {
    if (tree_->held[p]) pages.push_back(PageId(p));
  }
  return pages;
}

}  // namespace flashkit
