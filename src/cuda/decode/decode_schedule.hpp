// Which keys a decode CTA streams: the union of its query rows' visible keys (core/mask_rules),
// cut into num_splits contiguous parts of whole steps. Host and device, so the host test
// (tests/gpu/decode/test_decode_schedule.cpp) proves it against core::key_visible key by key.
//
// Query token i of a sequence with len_q queries and len_k keys sits on diagonal
// i + len_k - len_q (bottom-right) and sees the band [lo(i), hi(i)] plus the prefix
// [0, prefix_len). lo and hi never decrease with i, so the tokens first..last see only keys in
// [lo(first), hi(last)] (and the prefix): one contiguous span per CTA.
#pragma once

#include <cstdint>

#include "core/host_device.hpp"
#include "core/mask_rules.hpp"

namespace flashkit::cuda::decode {

// Keys [lo, hi); empty when hi <= lo.
struct KeySpan {
  std::int64_t lo, hi;
};

// Every key that some token in [tok_first, tok_last] may see, and no key outside [0, len_k).
FLASHKIT_HD KeySpan visible_span(const core::MaskRule& rule, std::int64_t len_q, std::int64_t len_k,
                                 std::int64_t tok_first, std::int64_t tok_last) {
  const std::int64_t shift = core::diagonal_shift(rule, len_q, len_k);
  std::int64_t lo = core::key_band(rule, tok_first + shift, len_k).lo;
  std::int64_t hi = core::key_band(rule, tok_last + shift, len_k).hi + 1;
  if (rule.prefix_len > 0) {
    lo = 0;
    const std::int64_t prefix_end = rule.prefix_len < len_k ? rule.prefix_len : len_k;
    if (hi < prefix_end) hi = prefix_end;
  }
  if (lo < 0) lo = 0;
  if (hi > len_k) hi = len_k;
  return {lo, hi > lo ? hi : lo};
}

// Split `split` of `num_splits` of the span: steps of `step` keys (aligned to multiples of step,
// so a step never straddles a page of >= step tokens) shared out as evenly as whole steps allow.
// The splits are disjoint and cover the span; trailing ones may be empty.
FLASHKIT_HD KeySpan split_span(KeySpan all, std::int64_t split, std::int64_t num_splits,
                               std::int64_t step) {
  if (all.hi <= all.lo) return {all.lo, all.lo};
  const std::int64_t base = all.lo / step * step;
  const std::int64_t steps = (all.hi - base + step - 1) / step;
  const std::int64_t per_split = (steps + num_splits - 1) / num_splits;
  std::int64_t lo = base + split * per_split * step;
  std::int64_t hi = lo + per_split * step;
  if (lo < all.lo) lo = all.lo;
  if (hi > all.hi) hi = all.hi;
  return {lo, hi > lo ? hi : lo};
}

// True when the keys of visible_span are not all visible to every token in [tok_first,
// tok_last], so each (row, key) pair must be tested: the tokens' bands differ, or the prefix
// leaves a hidden gap before the band. One decode token without prefix needs no test.
FLASHKIT_HD bool needs_key_mask(const core::MaskRule& rule, std::int64_t tok_first,
                                std::int64_t tok_last) {
  return core::masks_anything(rule) && (tok_last > tok_first || rule.prefix_len > 0);
}

}  // namespace flashkit::cuda::decode
