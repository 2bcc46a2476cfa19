// Which keys a decode CTA streams (cuda/decode/decode_schedule.hpp), on the host against
// core::key_visible key by key: the span holds every key some query of the tile sees; with one
// query token and no prefix it holds only those (so the kernel may skip the per-key test); the
// splits of a span are disjoint, cover it, and start on step boundaries.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/mask_rules.hpp"
#include "cuda/decode/decode_schedule.hpp"

namespace flashkit::testing {
namespace {

using cuda::decode::KeySpan;

std::vector<core::MaskRule> rules() {
  std::vector<core::MaskRule> all;
  for (bool causal : {false, true}) {
    for (std::int64_t wl : {-1, 0, 7, 40}) {
      for (std::int64_t wr : {-1, 0, 3}) {
        for (std::int64_t prefix : {0, 5, 29}) {
          core::MaskRule r;
          r.causal = causal;
          r.window_left = wl;
          r.window_right = wr;
          r.prefix_len = prefix;
          all.push_back(r);
        }
      }
    }
  }
  return all;
}

TEST(DecodeSchedule, SpanHoldsEveryVisibleKeyAndOnlyThoseForOneToken) {
  for (const core::MaskRule& rule : rules()) {
    for (std::int64_t len_k : {1, 3, 17, 64, 100}) {
      for (std::int64_t len_q : {1, 2, 3}) {
        if (len_q > len_k) continue;
        const std::int64_t shift = core::diagonal_shift(rule, len_q, len_k);
        for (std::int64_t first = 0; first < len_q; ++first) {
          for (std::int64_t last = first; last < len_q; ++last) {
            const KeySpan span = cuda::decode::visible_span(rule, len_q, len_k, first, last);
            ASSERT_GE(span.lo, 0);
            ASSERT_LE(span.hi, len_k);
            const bool exact = !cuda::decode::needs_key_mask(rule, first, last);
            for (std::int64_t j = 0; j < len_k; ++j) {
              bool seen = false, seen_by_all = true;
              for (std::int64_t i = first; i <= last; ++i) {
                const bool v = core::key_visible(rule, i + shift, j, len_k);
                seen = seen || v;
                seen_by_all = seen_by_all && v;
              }
              const bool in_span = j >= span.lo && j < span.hi;
              ASSERT_TRUE(!seen || in_span) << "key " << j << " seen but outside the span";
              ASSERT_TRUE(!exact || !in_span || seen_by_all)
                  << "key " << j << " in the span of an unmasked tile but hidden from a query";
            }
          }
        }
      }
    }
  }
}

TEST(DecodeSchedule, SplitsAreDisjointCoverTheSpanAndStartOnSteps) {
  for (std::int64_t lo : {0, 3, 16, 37}) {
    for (std::int64_t len : {0, 1, 15, 16, 17, 300, 4100}) {
      for (std::int64_t step : {4, 8, 16}) {
        for (std::int64_t splits : {1, 2, 3, 7, 64}) {
          const KeySpan all{lo, lo + len};
          std::int64_t next = lo;
          for (std::int64_t s = 0; s < splits; ++s) {
            const KeySpan part = cuda::decode::split_span(all, s, splits, step);
            if (part.hi <= part.lo) continue;  // empty splits may come anywhere after the keys
            ASSERT_EQ(part.lo, next) << "split " << s << " leaves a gap or overlaps";
            ASSERT_TRUE(s == 0 || part.lo % step == 0) << "split " << s << " starts mid-step";
            next = part.hi;
          }
          ASSERT_EQ(next, all.hi) << "the splits do not reach the end of the span";
        }
      }
    }
  }
}

}  // namespace
}  // namespace flashkit::testing
