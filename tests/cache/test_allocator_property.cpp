// BlockAllocator against a reference model over 10^5 random operations per page size. The model
// keeps each sequence's pages and, per token, the stamp that its slot must hold; the "device"
// is a simulated page array that append() results are applied to (copies first, then the new
// tokens' stamps). If the allocator shared a page it should have copied, or handed out a page that
// is still in use, some sequence would read another's stamp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include "expect_error.hpp"
#include "flashkit/kv_cache.hpp"

namespace flashkit::testing {
namespace {

constexpr std::int64_t kPages = 48;
constexpr int kOps = 100000;
constexpr int kFullCheckEvery = 1;  // contents and tables; refcounts are checked after every op
constexpr std::size_t kMaxSeqs = 20;

struct ModelSeq {
  std::vector<PageId> pages;
  std::vector<std::uint64_t> stamps;  // what token i's slot must hold
};

class AllocatorModel {
 public:
  AllocatorModel(std::int64_t page_size, std::uint64_t seed)
      : a_(kPages, page_size),
        ps_(page_size),
        rng_(seed),
        refs_(kPages, 0),
        holds_(kPages, 0),
        content_(kPages, std::vector<std::uint64_t>(std::size_t(page_size), 0)) {}

  void step() {
    const auto op = below(100);
    const bool crowded = seqs_.size() >= kMaxSeqs;
    if (op < 8 && !crowded) return create();
    if (op < 16 && !crowded) return create_with_prefix();
    if (op < 26 && !crowded) return fork();
    if (op < 62) return append();
    if (op < 80 || crowded) return free();
    if (op < 90) return retain();
    return release();
  }

  // Refcounts and the free count, exact after every operation.
  void check_refcounts() const {
    std::vector<std::int32_t> counted = holds_;
    for (const auto& [id, s] : seqs_) {
      for (PageId p : s.pages) ++counted[std::size_t(p)];
    }
    ASSERT_EQ(counted, refs_) << "the model's own bookkeeping drifted";
    std::int64_t free = 0;
    for (PageId p = 0; p < kPages; ++p) {
      ASSERT_EQ(a_.refcount(p), refs_[std::size_t(p)]) << "page " << p;
      free += refs_[std::size_t(p)] == 0;
    }
    ASSERT_EQ(a_.free_pages(), free);
  }

  // Every sequence reads back its own stamps; pages, lengths and both table layouts agree.
  void check_full() const {
    std::vector<SeqId> ids;
    for (const auto& [id, s] : seqs_) {
      ids.push_back(id);
      ASSERT_EQ(a_.pages(id), s.pages);
      ASSERT_EQ(a_.length(id), std::int64_t(s.stamps.size()));
      for (std::size_t i = 0; i < s.stamps.size(); ++i) {
        ASSERT_EQ(slot(s, i), s.stamps[i]) << "sequence " << id << " token " << i;
      }
    }
    std::shuffle(ids.begin(), ids.end(), rng_);
    const BlockTables t = a_.tables(ids);
    ASSERT_EQ(t.indptr.size(), ids.size() + 1);
    std::int64_t max_pages = 0;
    for (std::size_t b = 0; b < ids.size(); ++b) {
      const ModelSeq& s = seqs_.at(ids[b]);
      const auto n = std::int64_t(s.pages.size());
      max_pages = std::max(max_pages, n);
      ASSERT_EQ(t.indptr[b + 1] - t.indptr[b], n);
      ASSERT_TRUE(std::equal(s.pages.begin(), s.pages.end(), t.indices.begin() + t.indptr[b]));
      ASSERT_EQ(t.seq_lens[b], std::int64_t(s.stamps.size()));
      const std::int64_t last = n == 0 ? 0 : std::int64_t(s.stamps.size()) - (n - 1) * ps_;
      ASSERT_EQ(t.last_page_len[b], last);
    }
    ASSERT_EQ(t.max_pages, max_pages);
    ASSERT_EQ(t.padded.size(), ids.size() * std::size_t(max_pages));
    for (std::size_t b = 0; b < ids.size(); ++b) {
      const ModelSeq& s = seqs_.at(ids[b]);
      for (std::int64_t j = 0; j < max_pages; ++j) {
        const std::int32_t want = j < std::int64_t(s.pages.size()) ? s.pages[std::size_t(j)] : -1;
        ASSERT_EQ(t.padded[b * std::size_t(max_pages) + std::size_t(j)], want);
      }
    }
  }

  std::int64_t appends_refused() const { return refused_; }
  std::int64_t copies_made() const { return copies_; }

 private:
  std::uint64_t below(std::uint64_t n) { return rng_() % n; }
  std::uint64_t slot(const ModelSeq& s, std::size_t token) const {
    return content_[std::size_t(s.pages[token / std::size_t(ps_)])][token % std::size_t(ps_)];
  }
  SeqId any_seq() {
    auto it = seqs_.begin();
    std::advance(it, std::ptrdiff_t(below(seqs_.size())));
    return it->first;
  }

  void create() { seqs_[a_.create()] = ModelSeq{}; }

  void create_with_prefix() {
    if (seqs_.empty()) return;
    const ModelSeq& src = seqs_.at(any_seq());
    if (src.stamps.empty()) return;
    const auto tokens = std::int64_t(1 + below(src.stamps.size()));
    ModelSeq s;
    s.pages.assign(src.pages.begin(), src.pages.begin() + (tokens + ps_ - 1) / ps_);
    s.stamps.assign(src.stamps.begin(), src.stamps.begin() + tokens);
    for (PageId p : s.pages) ++refs_[std::size_t(p)];
    seqs_[a_.create_with_prefix(s.pages, tokens)] = std::move(s);
  }

  void fork() {
    if (seqs_.empty()) return;
    const SeqId parent = any_seq();
    ModelSeq s = seqs_.at(parent);
    for (PageId p : s.pages) ++refs_[std::size_t(p)];
    seqs_[a_.fork(parent)] = std::move(s);
  }

  void append() {
    if (seqs_.empty()) return;
    const SeqId id = any_seq();
    ModelSeq& s = seqs_.at(id);
    const auto len = std::int64_t(s.stamps.size());
    const auto tokens =
        std::int64_t(below(2) ? 1 + below(std::uint64_t(ps_)) : below(std::uint64_t(2 * ps_ + 2)));
    const bool copy = tokens > 0 && len % ps_ != 0 && refs_[std::size_t(s.pages.back())] > 1;
    const std::int64_t fresh = (len + tokens + ps_ - 1) / ps_ - std::int64_t(s.pages.size());
    const std::int64_t free = std::count(refs_.begin(), refs_.end(), 0);
    if (fresh + copy > free) {
      ++refused_;
      expect_error([&] { a_.append(id, tokens); }, "tokens", "free");
      return;  // check_refcounts and check_full see that nothing changed
    }

    const AppendResult r = a_.append(id, tokens);
    ASSERT_EQ(std::int64_t(r.new_pages.size()), fresh + copy);
    for (PageId p : r.new_pages) {
      ASSERT_EQ(refs_[std::size_t(p)], 0) << "page " << p << " handed out while in use";
      refs_[std::size_t(p)] = 1;
    }
    auto next = r.new_pages.begin();
    if (copy) {
      ++copies_;
      ASSERT_EQ(r.copies.size(), 1u);
      ASSERT_EQ(r.copies[0].from, s.pages.back());
      ASSERT_EQ(r.copies[0].to, *next);
      content_[std::size_t(r.copies[0].to)] = content_[std::size_t(r.copies[0].from)];
      --refs_[std::size_t(s.pages.back())];
      s.pages.back() = *next++;
    } else {
      ASSERT_TRUE(r.copies.empty());
    }
    s.pages.insert(s.pages.end(), next, r.new_pages.end());
    for (std::int64_t i = len; i < len + tokens; ++i) {
      s.stamps.push_back(++stamp_);
      content_[std::size_t(s.pages[std::size_t(i / ps_)])][std::size_t(i % ps_)] = stamp_;
    }
  }

  void free() {
    if (seqs_.empty()) return;
    const SeqId id = any_seq();
    for (PageId p : seqs_.at(id).pages) --refs_[std::size_t(p)];
    seqs_.erase(id);
    a_.free(id);
  }

  void retain() {
    const auto p = PageId(below(kPages));
    if (refs_[std::size_t(p)] == 0) return;
    a_.retain(p);
    ++refs_[std::size_t(p)];
    ++holds_[std::size_t(p)];
  }

  void release() {
    const auto p = PageId(below(kPages));
    if (holds_[std::size_t(p)] == 0) return;
    a_.release(p);
    --refs_[std::size_t(p)];
    --holds_[std::size_t(p)];
  }

  BlockAllocator a_;
  std::int64_t ps_;
  mutable std::mt19937_64 rng_;
  std::map<SeqId, ModelSeq> seqs_;
  std::vector<std::int32_t> refs_;                   // sequences + external holders, per page
  std::vector<std::int32_t> holds_;                  // external holders (retain) per page
  std::vector<std::vector<std::uint64_t>> content_;  // the simulated page array
  std::uint64_t stamp_ = 0;
  std::int64_t refused_ = 0, copies_ = 0;
};

class AllocatorProperty : public ::testing::TestWithParam<std::int64_t> {};

TEST_P(AllocatorProperty, MatchesTheModel) {
  AllocatorModel m(GetParam(), 0x5eed0000 + std::uint64_t(GetParam()));
  for (int op = 1; op <= kOps; ++op) {
    m.step();
    m.check_refcounts();
    if (op % kFullCheckEvery == 0) m.check_full();
    ASSERT_FALSE(HasFailure()) << "after operation " << op;
  }
  // The run must have exercised the interesting paths, not just the easy ones.
  if (GetParam() > 1) {  // a one-token page is never partially filled
    EXPECT_GT(m.copies_made(), 100);
  }
  EXPECT_GT(m.appends_refused(), 100);
}

INSTANTIATE_TEST_SUITE_P(PageSizes, AllocatorProperty, ::testing::Values(1, 16, 64, 256));

}  // namespace
}  // namespace flashkit::testing
