// A paged KV cache's bookkeeping on the host: which pages each sequence owns, shared pages
// counted by reference, copy-on-write when a shared last page is written. No device memory is
// touched here: the caller owns the K/V page arrays ([pages, page_size, kv_heads, d]) and copies
// a page when append() says so.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace flashkit {

using SeqId = std::int64_t;
using PageId = std::int32_t;

// A page a sequence must copy before writing: the contents of `from` go to `to` (all tokens).
struct PageCopy {
  PageId from, to;
};

// What append() did: pages newly owned by the sequence, and copies the caller must perform
// (copy-on-write of a shared last page) before writing the new tokens.
struct AppendResult {
  std::vector<PageId> new_pages;
  std::vector<PageCopy> copies;
};

// Block tables of a batch of sequences in the two layouts kernels take.
//   CSR (FlashInfer's): sequence b's pages are indices[indptr[b] .. indptr[b+1]), the last one
//     holding last_page_len[b] tokens (1..page_size; 0 only for an empty sequence).
//   Padded (vLLM's / FlashAttention's block_table): [batch, max_pages] row-major, unused slots -1.
// seq_lens[b] = tokens of sequence b.
struct BlockTables {
  std::vector<std::int32_t> indptr, indices, last_page_len;
  std::vector<std::int32_t> padded;
  std::int64_t max_pages = 0;
  std::vector<std::int32_t> seq_lens;
};

// Thread safety: every public member function takes the allocator's lock, so any mix of calls
// from several threads is safe; each call is atomic with respect to the others.
class BlockAllocator {
 public:
  // page_size: a power of two in 1..256.
  BlockAllocator(std::int64_t num_pages, std::int64_t page_size);

  std::int64_t num_pages() const { return num_pages_; }
  std::int64_t page_size() const { return page_size_; }
  std::int64_t free_pages() const;

  // A new empty sequence.
  SeqId create();
  // A new sequence whose first `tokens` tokens are already in `pages` (a cached prefix): it
  // shares them (refcounts + 1). tokens must lie in (pages.size() - 1) * page_size + 1 ..
  // pages.size() * page_size, or be 0 with no pages.
  SeqId create_with_prefix(const std::vector<PageId>& pages, std::int64_t tokens);
  // A child that shares every page of `parent` (refcounts + 1); writing to the shared last page
  // later copies it (copy-on-write). The parent is untouched.
  SeqId fork(SeqId parent);
  // Makes room for `tokens` more tokens at the end of `seq`. Throws flashkit::Error (and changes
  // nothing) when the pool has too few free pages.
  AppendResult append(SeqId seq, std::int64_t tokens);
  // Releases the sequence; pages whose refcount drops to 0 return to the free list.
  void free(SeqId seq);

  // References held outside sequences (a prefix cache keeping pages alive).
  void retain(PageId page);
  void release(PageId page);

  std::int64_t length(SeqId seq) const;        // tokens
  std::vector<PageId> pages(SeqId seq) const;  // in token order
  std::int32_t refcount(PageId page) const;    // 0 for a free page
  bool contains(SeqId seq) const;

  // Tables of `seqs` in the given order.
  BlockTables tables(const std::vector<SeqId>& seqs) const;

 private:
  struct Sequence {
    std::vector<PageId> pages;  // ceil(length / page_size) of them
    std::int64_t length = 0;    // tokens
  };

  // Helpers for callers that hold mutex_.
  const Sequence& find(SeqId seq, const std::string& argument) const;
  Sequence& find(SeqId seq, const std::string& argument);
  void expect_allocated(PageId page, const std::string& argument) const;
  SeqId add(Sequence sequence);
  void drop(PageId page);  // one reference less; at 0 the page returns to the free list

  std::int64_t num_pages_, page_size_;
  std::vector<std::int32_t> refcounts_;  // per page; 0 = on the free list
  std::vector<PageId> free_list_;        // a stack: the most recently freed page is reused first
  std::unordered_map<SeqId, Sequence> seqs_;
  SeqId next_seq_ = 0;  // ids are never reused, so a stale id is an error, not another sequence
  mutable std::mutex mutex_;
};

}  // namespace flashkit
