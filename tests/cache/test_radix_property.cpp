// RadixCache against a brute-force model over 10^5 random insert / match / lock / unlock / evict
// operations per page size. The model is the set of cached pages, each named by (key, the tokens
// up to and including it), which is closed under prefixes; a match must be the longest run of
// such pages, with the same page ids. Eviction is checked by how much it frees (exactly what was
// asked, or everything unlocked), by what survives (a prefix-closed subset of the model that keeps
// every locked path) and by the allocator's refcounts, which must be the trie's references and
// nothing else once the operation's own sequences are freed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "flashkit/error.hpp"
#include "flashkit/radix_cache.hpp"

namespace flashkit::testing {
namespace {

constexpr std::int64_t kPages = 96;
constexpr int kOps = 100000;
constexpr std::size_t kMaxLocks = 12;
constexpr Token kAlphabet = 3;  // few distinct tokens, so that prefixes are shared often

using Tokens = std::vector<Token>;
using Prefix = std::pair<CacheKey, Tokens>;  // a cached page: the tokens up to its end

struct Locked {
  RadixNodeHandle node;
  CacheKey key;
  Tokens tokens;  // the matched tokens
};

class RadixModel {
 public:
  RadixModel(std::int64_t page_size, std::uint64_t seed)
      : a_(kPages, page_size), c_(a_), ps_(page_size), rng_(seed) {}

  void step() {
    const auto op = below(100);
    if (op < 40) return insert();
    if (op < 75) return match();
    if (op < 87) return unlock();
    return evict();
  }

  // The trie's references are the model's pages and the allocator agrees page by page.
  void check() const {
    std::vector<PageId> model_pages;
    for (const auto& entry : cached_) model_pages.push_back(entry.second);
    std::sort(model_pages.begin(), model_pages.end());
    ASSERT_EQ(c_.held_pages(), model_pages);
    for (PageId p = 0; p < kPages; ++p) {
      const bool held = std::binary_search(model_pages.begin(), model_pages.end(), p);
      ASSERT_EQ(a_.refcount(p), held ? 1 : 0) << "page " << p;
    }
    ASSERT_EQ(a_.free_pages(), kPages - std::int64_t(model_pages.size()));
    const RadixCacheStats s = c_.stats();
    ASSERT_EQ(s.pages_held, std::int64_t(cached_.size()));
    ASSERT_EQ(s.locked_pages, std::int64_t(protected_pages().size()));
    ASSERT_EQ(s.hit_tokens, hit_tokens_);
    ASSERT_EQ(s.miss_tokens, miss_tokens_);
    ASSERT_EQ(s.inserted_tokens, inserted_tokens_);
  }

  std::int64_t evicted() const { return evicted_; }
  std::int64_t hits() const { return hit_tokens_; }

 private:
  std::uint64_t below(std::uint64_t n) { return rng_() % n; }

  // A sequence that often continues a cached one: some of its prefix, then random tokens.
  Tokens make_tokens() {
    Tokens t;
    if (!seqs_.empty() && below(4) != 0) {
      auto it = seqs_.begin();
      std::advance(it, std::ptrdiff_t(below(seqs_.size())));
      t.assign(it->second.begin(),
               it->second.begin() + std::ptrdiff_t(below(it->second.size() + 1)));
    }
    const auto target = std::size_t(below(std::uint64_t(8 * ps_ + 1)));
    while (t.size() < target) t.push_back(Token(below(std::uint64_t(kAlphabet))));
    return t;
  }
  CacheKey make_key() { return CacheKey(below(4) == 0); }

  // Brute force: the longest run of cached pages at the start of `tokens`.
  std::vector<PageId> longest(CacheKey key, const Tokens& tokens) const {
    std::vector<PageId> pages;
    for (std::size_t end = std::size_t(ps_); end <= tokens.size(); end += std::size_t(ps_)) {
      const auto it = cached_.find({key, Tokens(tokens.begin(), tokens.begin() + end)});
      if (it == cached_.end()) break;
      pages.push_back(it->second);
    }
    return pages;
  }

  std::set<Prefix> protected_pages() const {
    std::set<Prefix> pages;
    for (const Locked& l : locked_) {
      for (std::size_t end = std::size_t(ps_); end <= l.tokens.size(); end += std::size_t(ps_)) {
        pages.insert({l.key, Tokens(l.tokens.begin(), l.tokens.begin() + end)});
      }
    }
    return pages;
  }

  // A finished request: match, reuse the match (or not: a duplicate computation), fill the rest,
  // insert, free. Evicts for room like a server would.
  void insert() {
    const CacheKey key = make_key();
    const Tokens tokens = make_tokens();
    SeqId s;
    std::int64_t reused = 0;
    if (below(2) != 0) {
      const PrefixMatch m = c_.match_prefix(tokens, key);
      count_match(key, tokens, m);
      s = a_.create_with_prefix(m.pages, m.length);
      reused = m.length;
    } else {
      s = a_.create();
    }
    const auto rest = std::int64_t(tokens.size()) - reused;
    const std::int64_t needed = (rest + ps_ - 1) / ps_;
    if (needed > a_.free_pages()) evict_pages(needed - a_.free_pages());
    if (needed > a_.free_pages()) {  // everything left is locked or in use
      a_.free(s);
      return;
    }
    a_.append(s, rest);
    const std::vector<PageId> pages = a_.pages(s);

    const std::size_t full = tokens.size() / std::size_t(ps_);
    std::size_t already = 0;
    while (already < full && cached_.count(prefix(key, tokens, already + 1)) != 0) ++already;
    const PrefixInsert r = c_.insert(tokens, pages, key);
    ASSERT_EQ(r.cached, std::int64_t(already) * ps_);
    ASSERT_EQ(r.inserted, std::int64_t(full - already) * ps_);
    for (std::size_t k = already; k < full; ++k) cached_[prefix(key, tokens, k + 1)] = pages[k];
    inserted_tokens_ += r.inserted;
    if (full > 0) seqs_.insert({key, Tokens(tokens.begin(), tokens.begin() + full * ps_)});
    a_.free(s);
  }

  void match() {
    const CacheKey key = make_key();
    const Tokens tokens = make_tokens();
    const PrefixMatch m = c_.match_prefix(tokens, key);
    count_match(key, tokens, m);
    if (m.length > 0 && locked_.size() < kMaxLocks && below(2) != 0) {
      c_.lock(m.node);
      locked_.push_back({m.node, key, Tokens(tokens.begin(), tokens.begin() + m.length)});
    }
  }

  void count_match(CacheKey key, const Tokens& tokens, const PrefixMatch& m) {
    const std::vector<PageId> want = longest(key, tokens);
    ASSERT_EQ(m.pages, want);
    ASSERT_EQ(m.length, std::int64_t(want.size()) * ps_);
    hit_tokens_ += m.length;
    miss_tokens_ += std::int64_t(tokens.size()) - m.length;
  }

  void unlock() {
    if (locked_.empty()) return;
    const std::size_t i = std::size_t(below(locked_.size()));
    c_.unlock(locked_[i].node);
    locked_[i] = locked_.back();
    locked_.pop_back();
  }

  // Small, so that the trie fills the pool and inserts must evict too.
  void evict() { evict_pages(std::int64_t(below(8))); }

  void evict_pages(std::int64_t n) {
    const std::set<Prefix> locked = protected_pages();
    const auto evictable = std::int64_t(cached_.size() - locked.size());
    ASSERT_EQ(c_.evictable_pages(), evictable);
    const std::int64_t released = c_.evict(n);
    ASSERT_EQ(released, std::min(n, evictable));
    evicted_ += released;

    // What survived, read back through the sequences the model knows.
    std::map<Prefix, PageId> survived;
    std::set<Prefix> seqs;
    for (const Prefix& s : seqs_) {
      const std::vector<PageId> pages = c_.lookup(s.second, s.first);
      for (std::size_t k = 0; k < pages.size(); ++k) {
        const Prefix p = prefix(s.first, s.second, k + 1);
        const auto it = cached_.find(p);
        ASSERT_TRUE(it != cached_.end()) << "a page the model never cached";
        ASSERT_EQ(it->second, pages[k]) << "a surviving page changed";
        survived[p] = pages[k];
      }
      if (!pages.empty()) seqs.insert(prefix(s.first, s.second, pages.size()));
    }
    ASSERT_EQ(std::int64_t(cached_.size() - survived.size()), released);
    for (const Prefix& p : locked) ASSERT_EQ(survived.count(p), 1u) << "a locked page evicted";
    cached_ = std::move(survived);
    seqs_ = std::move(seqs);
  }

  Prefix prefix(CacheKey key, const Tokens& tokens, std::size_t pages) const {
    return {key, Tokens(tokens.begin(), tokens.begin() + std::ptrdiff_t(pages) * ps_)};
  }

  BlockAllocator a_;
  RadixCache c_;
  std::int64_t ps_;
  std::mt19937_64 rng_;
  std::map<Prefix, PageId> cached_;  // the model: every cached page
  std::set<Prefix> seqs_;            // cached sequences (page-aligned) that cover cached_
  std::vector<Locked> locked_;
  std::int64_t hit_tokens_ = 0, miss_tokens_ = 0, inserted_tokens_ = 0, evicted_ = 0;
};

class RadixProperty : public ::testing::TestWithParam<std::int64_t> {};

TEST_P(RadixProperty, MatchesTheModel) {
  RadixModel m(GetParam(), 0xca11ab1e + std::uint64_t(GetParam()));
  for (int op = 1; op <= kOps; ++op) {
    m.step();
    m.check();
    ASSERT_FALSE(HasFailure()) << "after operation " << op;
  }
  EXPECT_GT(m.evicted(), 1000);
  EXPECT_GT(m.hits(), 1000);
}

INSTANTIATE_TEST_SUITE_P(PageSizes, RadixProperty, ::testing::Values(1, 4, 16));

}  // namespace
}  // namespace flashkit::testing
