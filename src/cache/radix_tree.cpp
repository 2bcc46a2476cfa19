#include "cache/radix_tree.hpp"

#include <algorithm>
#include <utility>

#include "flashkit/error.hpp"

namespace flashkit {

detail::RadixTree::RadixTree(BlockAllocator& allocator_ref, std::int64_t page_size_value)
    : allocator(allocator_ref),
      page_size(page_size_value),
      held(std::size_t(allocator_ref.num_pages()), false) {}

detail::RadixTree::~RadixTree() {
  for (std::size_t p = 0; p < held.size(); ++p) {
    if (held[p]) allocator.release(PageId(p));
  }
}

detail::RadixTree::Node* detail::RadixTree::make_node(Node* parent) {
  auto owned = std::make_unique<Node>();
  Node* node = owned.get();
  node->id = next_id++;
  node->parent = parent;
  nodes.emplace(node->id, std::move(owned));
  if (parent != nullptr) ++stats.nodes;
  return node;
}

detail::RadixTree::Node* detail::RadixTree::root(CacheKey key) {
  const auto it = roots.find(key);
  if (it != roots.end()) return it->second;
  Node* node = make_node(nullptr);
  roots.emplace(key, node);
  return node;
}

const detail::RadixTree::Node* detail::RadixTree::find_root(CacheKey key) const {
  const auto it = roots.find(key);
  return it == roots.end() ? nullptr : it->second;
}

detail::RadixTree::Node* detail::RadixTree::find(RadixNodeHandle handle,
                                                 const std::string& argument) const {
  const auto it = nodes.find(handle.id);
  if (it == nodes.end()) {
    const bool removed = handle.id >= 0 && handle.id < next_id;
    throw Error(argument, "a node of this cache",
                "node " + std::to_string(handle.id) +
                    (removed ? " (evicted or merged away)" : " (never existed)"));
  }
  return it->second.get();
}

detail::RadixTree::Node* detail::RadixTree::child_for(const Node* node, const Token* page) const {
  const auto range = node->children.equal_range(page[0]);
  for (auto it = range.first; it != range.second; ++it) {
    if (std::equal(page, page + page_size, it->second->tokens.begin())) return it->second;
  }
  return nullptr;
}

detail::RadixTree::Walk detail::RadixTree::walk(const Node* root_node,
                                                const std::vector<Token>& tokens) const {
  // Only whole pages can match: a cached page holds page_size tokens, all of which must agree.
  const auto usable = std::int64_t(tokens.size()) / page_size * page_size;
  Walk w;
  w.node = const_cast<Node*>(root_node);
  while (w.length < usable) {
    Node* child = child_for(w.node, tokens.data() + w.length);
    if (child == nullptr) break;
    // The first page agreed (child_for); compare the rest of the edge page by page.
    const auto edge = std::int64_t(child->pages.size());
    std::int64_t k = 1;
    while (k < edge && w.length + (k + 1) * page_size <= usable &&
           std::equal(child->tokens.begin() + k * page_size,
                      child->tokens.begin() + (k + 1) * page_size,
                      tokens.begin() + w.length + k * page_size)) {
      ++k;
    }
    w.length += k * page_size;
    if (k < edge) {
      w.next = child;
      w.partial = k;
      break;
    }
    w.node = child;
  }
  return w;
}

void detail::RadixTree::walk_pages(const Walk& w, std::vector<PageId>& out) const {
  std::vector<const Node*> path;  // leaf to root
  for (const Node* n = w.node; n->parent != nullptr; n = n->parent) path.push_back(n);
  for (auto n = path.rbegin(); n != path.rend(); ++n) {
    out.insert(out.end(), (*n)->pages.begin(), (*n)->pages.end());
  }
  if (w.next != nullptr) {
    out.insert(out.end(), w.next->pages.begin(), w.next->pages.begin() + w.partial);
  }
}

void detail::RadixTree::detach(Node* node) {
  auto range = node->parent->children.equal_range(node->tokens.front());
  for (auto it = range.first; it != range.second; ++it) {
    if (it->second == node) {
      node->parent->children.erase(it);
      return;
    }
  }
}

detail::RadixTree::Node* detail::RadixTree::split(Node* child, std::int64_t pages) {
  Node* parent = child->parent;
  Node* top = make_node(parent);
  const auto cut = pages * page_size;
  top->tokens.assign(child->tokens.begin(), child->tokens.begin() + cut);
  top->pages.assign(child->pages.begin(), child->pages.begin() + pages);
  // Every lock below `child` passed through the part that is now `top`.
  top->lock = child->lock;
  top->last_access = child->last_access;
  top->hits = child->hits;

  detach(child);
  child->tokens.erase(child->tokens.begin(), child->tokens.begin() + cut);
  child->pages.erase(child->pages.begin(), child->pages.begin() + pages);
  child->parent = top;
  top->children.emplace(child->tokens.front(), child);
  parent->children.emplace(top->tokens.front(), top);
  return top;
}

detail::RadixTree::Node* detail::RadixTree::add_leaf(Node* parent, const std::vector<Token>& tokens,
                                                     const std::vector<PageId>& pages,
                                                     std::int64_t begin, std::int64_t end) {
  Node* leaf = make_node(parent);
  leaf->tokens.assign(tokens.begin() + begin, tokens.begin() + end);
  leaf->pages.assign(pages.begin() + begin / page_size, pages.begin() + end / page_size);
  for (PageId p : leaf->pages) {
    allocator.retain(p);
    held[std::size_t(p)] = true;
  }
  stats.pages_held += std::int64_t(leaf->pages.size());
  parent->children.emplace(leaf->tokens.front(), leaf);
  return leaf;
}

void detail::RadixTree::trim_leaf(Node* leaf, std::int64_t pages) {
  const auto keep = std::int64_t(leaf->pages.size()) - pages;
  for (auto p = leaf->pages.begin() + keep; p != leaf->pages.end(); ++p) {
    allocator.release(*p);
    held[std::size_t(*p)] = false;
  }
  stats.pages_held -= pages;
  if (keep > 0) {
    leaf->pages.resize(std::size_t(keep));
    leaf->tokens.resize(std::size_t(keep * page_size));
    return;
  }
  detach(leaf);
  nodes.erase(leaf->id);
  --stats.nodes;
}

void detail::RadixTree::merge_into_child(Node* node) {
  Node* child = node->children.begin()->second;
  detach(node);
  child->tokens.insert(child->tokens.begin(), node->tokens.begin(), node->tokens.end());
  child->pages.insert(child->pages.begin(), node->pages.begin(), node->pages.end());
  child->parent = node->parent;
  node->parent->children.emplace(child->tokens.front(), child);
  nodes.erase(node->id);
  --stats.nodes;
}

}  // namespace flashkit
