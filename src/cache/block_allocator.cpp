// BlockAllocator: a free list of page ids, a reference count per page and each sequence's page
// list. Every public call validates all of its arguments and sizes its allocations before the
// first change, so a throwing call leaves the allocator exactly as it was.
#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include "flashkit/error.hpp"
#include "flashkit/kv_cache.hpp"

namespace flashkit {
namespace {

using Lock = std::lock_guard<std::mutex>;

std::string num(std::int64_t v) {
  return std::to_string(v);
}

std::int64_t checked_num_pages(std::int64_t num_pages) {
  // Page ids are int32 (kernels' block tables are i32).
  if (num_pages < 1 || num_pages > std::numeric_limits<PageId>::max()) {
    throw Error("num_pages", "a page count in 1.." + num(std::numeric_limits<PageId>::max()),
                num(num_pages));
  }
  return num_pages;
}

std::int64_t checked_page_size(std::int64_t page_size) {
  if (page_size < 1 || page_size > 256 || (page_size & (page_size - 1)) != 0) {
    throw Error("page_size", "a power of two in 1..256", num(page_size));
  }
  return page_size;
}

std::int64_t pages_for(std::int64_t tokens, std::int64_t page_size) {
  return (tokens + page_size - 1) / page_size;
}

}  // namespace

BlockAllocator::BlockAllocator(std::int64_t num_pages, std::int64_t page_size)
    : num_pages_(checked_num_pages(num_pages)),
      page_size_(checked_page_size(page_size)),
      refcounts_(std::size_t(num_pages_), 0) {
  // Reversed so that a fresh allocator hands out pages 0, 1, 2, ... (readable tables in tests).
  free_list_.reserve(std::size_t(num_pages_));
  for (std::int64_t p = num_pages_ - 1; p >= 0; --p) free_list_.push_back(PageId(p));
}

std::int64_t BlockAllocator::free_pages() const {
  const Lock lock(mutex_);
  return std::int64_t(free_list_.size());
}

const BlockAllocator::Sequence& BlockAllocator::find(SeqId seq, const std::string& argument) const {
  const auto it = seqs_.find(seq);
  if (it == seqs_.end()) {
    const bool freed = seq >= 0 && seq < next_seq_;
    throw Error(argument, "a live sequence id",
                "sequence " + num(seq) + (freed ? " (already freed)" : " (never created)"));
  }
  return it->second;
}

void BlockAllocator::expect_allocated(PageId page, const std::string& argument) const {
  if (page < 0 || page >= num_pages_) {
    throw Error(argument, "a page id in 0.." + num(num_pages_ - 1), num(page));
  }
  if (refcounts_[std::size_t(page)] == 0) {
    throw Error(argument, "an allocated page", "page " + num(page) + ", which is free");
  }
}

BlockAllocator::Sequence& BlockAllocator::find(SeqId seq, const std::string& argument) {
  return const_cast<Sequence&>(std::as_const(*this).find(seq, argument));
}

SeqId BlockAllocator::add(Sequence sequence) {
  seqs_.emplace(next_seq_, std::move(sequence));
  return next_seq_++;
}

void BlockAllocator::drop(PageId page) {
  if (--refcounts_[std::size_t(page)] == 0) free_list_.push_back(page);
}

SeqId BlockAllocator::create() {
  const Lock lock(mutex_);
  return add(Sequence{});
}

SeqId BlockAllocator::create_with_prefix(const std::vector<PageId>& pages, std::int64_t tokens) {
  const Lock lock(mutex_);
  const auto n = std::int64_t(pages.size());
  if (n == 0 ? tokens != 0 : tokens <= (n - 1) * page_size_ || tokens > n * page_size_) {
    throw Error("tokens",
                n == 0 ? std::string("0 with no pages")
                       : num((n - 1) * page_size_ + 1) + ".." + num(n * page_size_) + " for " +
                             num(n) + " pages of " + num(page_size_),
                num(tokens));
  }
  for (std::size_t i = 0; i < pages.size(); ++i) {
    expect_allocated(pages[i], "pages[" + num(std::int64_t(i)) + "]");
  }
  // A page listed twice would hold two different token ranges at once.
  std::vector<PageId> sorted = pages;
  std::sort(sorted.begin(), sorted.end());
  const auto twice = std::adjacent_find(sorted.begin(), sorted.end());
  if (twice != sorted.end()) {
    const auto i = std::find(pages.begin(), pages.end(), *twice) - pages.begin();
    throw Error("pages[" + num(i) + "]", "distinct pages", "page " + num(*twice) + " twice");
  }
  for (PageId p : pages) ++refcounts_[std::size_t(p)];
  return add(Sequence{pages, tokens});
}

SeqId BlockAllocator::fork(SeqId parent) {
  const Lock lock(mutex_);
  Sequence child = find(parent, "parent");
  for (PageId p : child.pages) ++refcounts_[std::size_t(p)];
  return add(std::move(child));
}

AppendResult BlockAllocator::append(SeqId seq, std::int64_t tokens) {
  const Lock lock(mutex_);
  Sequence& s = find(seq, "seq");
  if (tokens < 0) throw Error("tokens", "a count >= 0", num(tokens));
  AppendResult result;
  if (tokens == 0) return result;

  // A partially filled last page that someone else also references (a fork, a prefix cache) must
  // not be written in place: the sequence gets a private copy first.
  const bool partial = s.length % page_size_ != 0;
  const bool copy_last = partial && refcounts_[std::size_t(s.pages.back())] > 1;
  const std::int64_t room = std::int64_t(free_list_.size());
  // Capped first so that length + tokens cannot overflow; such a count never fits anyway.
  const std::int64_t fresh =
      tokens > num_pages_ * page_size_
          ? num_pages_ + 1
          : pages_for(s.length + tokens, page_size_) - std::int64_t(s.pages.size());
  const std::int64_t needed = fresh + (copy_last ? 1 : 0);
  if (needed > room) {
    throw Error("tokens",
                "a count that fits the free pages (needs " + num(needed) + " pages, " + num(room) +
                    " free)",
                num(tokens));
  }

  // Allocations that may throw come before the first change (strong guarantee).
  result.new_pages.reserve(std::size_t(needed));
  if (copy_last) result.copies.reserve(1);
  s.pages.reserve(s.pages.size() + std::size_t(fresh));

  auto take = [&] {
    const PageId p = free_list_.back();
    free_list_.pop_back();
    refcounts_[std::size_t(p)] = 1;
    result.new_pages.push_back(p);
    return p;
  };
  if (copy_last) {
    const PageId shared = s.pages.back();
    const PageId copy = take();
    result.copies.push_back(PageCopy{shared, copy});
    s.pages.back() = copy;
    drop(shared);  // still referenced elsewhere: never freed here
  }
  for (std::int64_t i = 0; i < fresh; ++i) s.pages.push_back(take());
  s.length += tokens;
  return result;
}

void BlockAllocator::free(SeqId seq) {
  const Lock lock(mutex_);
  for (PageId p : find(seq, "seq").pages) drop(p);
  seqs_.erase(seq);
}

void BlockAllocator::retain(PageId page) {
  const Lock lock(mutex_);
  expect_allocated(page, "page");
  if (refcounts_[std::size_t(page)] == std::numeric_limits<std::int32_t>::max()) {
    throw Error("page", "a page with fewer than 2^31-1 references", "page " + num(page));
  }
  ++refcounts_[std::size_t(page)];
}

void BlockAllocator::release(PageId page) {
  const Lock lock(mutex_);
  expect_allocated(page, "page");
  drop(page);
}

std::int64_t BlockAllocator::length(SeqId seq) const {
  const Lock lock(mutex_);
  return find(seq, "seq").length;
}

std::vector<PageId> BlockAllocator::pages(SeqId seq) const {
  const Lock lock(mutex_);
  return find(seq, "seq").pages;
}

std::int32_t BlockAllocator::refcount(PageId page) const {
  const Lock lock(mutex_);
  if (page < 0 || page >= num_pages_) {
    throw Error("page", "a page id in 0.." + num(num_pages_ - 1), num(page));
  }
  return refcounts_[std::size_t(page)];
}

bool BlockAllocator::contains(SeqId seq) const {
  const Lock lock(mutex_);
  return seqs_.count(seq) != 0;
}

BlockTables BlockAllocator::tables(const std::vector<SeqId>& seqs) const {
  const Lock lock(mutex_);
  constexpr std::int64_t kMaxI32 = std::numeric_limits<std::int32_t>::max();
  std::vector<const Sequence*> found;
  found.reserve(seqs.size());
  std::int64_t total_pages = 0;
  for (std::size_t b = 0; b < seqs.size(); ++b) {
    const std::string argument = "seqs[" + num(std::int64_t(b)) + "]";
    const Sequence& s = find(seqs[b], argument);
    if (s.length > kMaxI32) {  // the tables are i32, as kernels take them
      throw Error(argument, "a sequence of at most " + num(kMaxI32) + " tokens", num(s.length));
    }
    total_pages += std::int64_t(s.pages.size());
    found.push_back(&s);
  }
  if (total_pages > kMaxI32) {
    throw Error("seqs", "at most " + num(kMaxI32) + " pages in all", num(total_pages));
  }

  BlockTables t;
  t.indptr.reserve(seqs.size() + 1);
  t.indices.reserve(std::size_t(total_pages));
  t.last_page_len.reserve(seqs.size());
  t.seq_lens.reserve(seqs.size());
  t.indptr.push_back(0);
  for (const Sequence* s : found) {
    t.indices.insert(t.indices.end(), s->pages.begin(), s->pages.end());
    t.indptr.push_back(std::int32_t(t.indices.size()));
    const std::int64_t full = (std::int64_t(s->pages.size()) - 1) * page_size_;
    t.last_page_len.push_back(std::int32_t(s->pages.empty() ? 0 : s->length - full));
    t.seq_lens.push_back(std::int32_t(s->length));
    t.max_pages = std::max(t.max_pages, std::int64_t(s->pages.size()));
  }
  t.padded.assign(found.size() * std::size_t(t.max_pages), -1);
  for (std::size_t b = 0; b < found.size(); ++b) {
    std::copy(found[b]->pages.begin(), found[b]->pages.end(),
              t.padded.begin() + std::ptrdiff_t(b * std::size_t(t.max_pages)));
  }
  return t;
}

}  // namespace flashkit
