// The trie behind RadixCache: nodes, page-aligned walks, edge splits, leaf removal and merges,
// with the trie's page references kept in step with the allocator. RadixCache adds validation,
// locking of its mutex, access times and statistics on top.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "flashkit/kv_cache.hpp"
#include "flashkit/radix_cache.hpp"

namespace flashkit {

namespace detail {

struct RadixTree {
  struct Node {
    std::int64_t id = -1;
    Node* parent = nullptr;     // null for a root
    std::vector<Token> tokens;  // the edge from the parent: pages.size() * page_size tokens
    std::vector<PageId> pages;
    // Children by the first token of their edge; children's first pages differ, though two may
    // share a first token when page_size > 1.
    std::unordered_multimap<Token, Node*> children;
    std::int64_t lock = 0;       // locks held on this node or below it
    std::int64_t own_locks = 0;  // locks taken through this node's handle
    std::uint64_t last_access = 0;
    std::uint64_t hits = 0;
  };

  // Where a page-aligned walk of a token sequence stopped: the whole edge of `node` matched, then
  // `partial` pages of the edge of `next` (1 <= partial < its pages; next null when none).
  struct Walk {
    Node* node = nullptr;
    Node* next = nullptr;
    std::int64_t partial = 0;
    std::int64_t length = 0;  // matched tokens, `partial` pages of `next` included
  };

  RadixTree(BlockAllocator& allocator, std::int64_t page_size);
  ~RadixTree();  // releases every held page

  Node* root(CacheKey key);                   // created on first use
  const Node* find_root(CacheKey key) const;  // null when the key was never used
  Node* find(RadixNodeHandle handle, const std::string& argument) const;  // throws when gone

  Walk walk(const Node* root, const std::vector<Token>& tokens) const;
  // Appends to `out` the pages of every edge on the walk's path, the partial ones included.
  void walk_pages(const Walk& walk, std::vector<PageId>& out) const;

  // Cuts the edge of `child` after `pages` pages (0 < pages < its pages); returns the new node
  // that now ends there. `child` keeps its handle, tokens after the cut and its children.
  Node* split(Node* child, std::int64_t pages);
  // A new leaf under `parent` for tokens[begin, end) and their pages (retained).
  Node* add_leaf(Node* parent, const std::vector<Token>& tokens, const std::vector<PageId>& pages,
                 std::int64_t begin, std::int64_t end);
  // Releases the last `pages` pages of an unlocked leaf (all of them: removes the leaf).
  void trim_leaf(Node* leaf, std::int64_t pages);
  // Joins an unlocked inner node with its only child, which keeps its handle and access times.
  void merge_into_child(Node* node);

  // The path from a node up to its root, the node first.
  template <typename F>
  static void for_path(Node* node, F&& f) {
    for (; node != nullptr; node = node->parent) f(*node);
  }

  BlockAllocator& allocator;
  std::int64_t page_size;
  std::unordered_map<std::int64_t, std::unique_ptr<Node>> nodes;  // owns every node, roots too
  std::unordered_map<CacheKey, Node*> roots;
  std::vector<bool> held;    // per allocator page: the trie references it
  std::int64_t next_id = 0;  // never reused, so a removed node's handle stays invalid
  std::uint64_t clock = 0;
  RadixCacheStats stats;

 private:
  Node* child_for(const Node* node, const Token* page) const;
  Node* make_node(Node* parent);
  void detach(Node* node);  // from its parent's children
};

}  // namespace detail
}  // namespace flashkit
