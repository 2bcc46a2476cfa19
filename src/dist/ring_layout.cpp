#include <algorithm>
#include <string>

#include "dist/ring_plan.hpp"
#include "flashkit/error.hpp"

namespace flashkit {

namespace dist {

std::vector<Chunk> shard_chunks(RingLayout layout, int ranks, int rank, std::int64_t local_seqlen) {
  if (layout == RingLayout::contiguous) return {{0, local_seqlen, rank}};
  const std::int64_t half = local_seqlen / 2;
  return {{0, half, rank}, {half, half, 2 * std::int64_t(ranks) - 1 - rank}};
}

bool chunks_meet(const core::MaskRule& rule, const Chunk& q, const Chunk& kv, std::int64_t total) {
  if (q.len <= 0 || kv.len <= 0) return false;
  const std::int64_t k0 = kv.first_token(), k1 = k0 + kv.len - 1;
  if (k0 < rule.prefix_len) return true;  // prefix-LM keys are seen by every query
  // A row's band [lo, hi] holds its own position (windows are unbounded or >= 0) and both ends
  // only move right with the row, so the rows whose band reaches k0 are a suffix of the chunk and
  // the first of them has the suffix's smallest lo: the pair meets when that lo is <= k1. One
  // binary search, where a pass over the rows cost ~10^5 band evaluations a call (a chunk of 8k
  // rows against each key chunk it never meets, every step).
  std::int64_t reach = q.first_token(), end = q.first_token() + q.len;
  while (reach < end) {
    const std::int64_t mid = reach + (end - reach) / 2;
    if (core::key_band(rule, mid, total).hi >= k0) {
      end = mid;
    } else {
      reach = mid + 1;
    }
  }
  return reach < q.first_token() + q.len && core::key_band(rule, reach, total).lo <= k1;
}

bool pair_sees_everything(const core::MaskRule& rule, bool alibi, const Chunk& q, const Chunk& kv,
                          std::int64_t total) {
  if (alibi || q.len <= 0 || kv.len <= 0) return false;
  // Keys before prefix_len are seen by every query; the others must lie in every row's band,
  // whose ends only move right with the row: the last row's start and the first row's end bound
  // them all.
  const std::int64_t k0 = std::max(kv.first_token(), rule.prefix_len);
  const std::int64_t k1 = kv.first_token() + kv.len - 1;
  if (k0 > k1) return true;
  const std::int64_t first = q.first_token(), last = first + q.len - 1;
  return core::key_band(rule, last, total).lo <= k0 && core::key_band(rule, first, total).hi >= k1;
}

}  // namespace dist

std::int64_t ring_global_position(RingLayout layout, int ranks, int rank, std::int64_t local_seqlen,
                                  std::int64_t t) {
  if (ranks < 1 || rank < 0 || rank >= ranks) {
    throw Error("rank",
                "0.." + std::to_string(ranks - 1) + " of " + std::to_string(ranks) + " ranks",
                std::to_string(rank));
  }
  if (t < 0 || t >= local_seqlen) {
    throw Error("t", "0.." + std::to_string(local_seqlen - 1), std::to_string(t));
  }
  for (const dist::Chunk& c : dist::shard_chunks(layout, ranks, rank, local_seqlen)) {
    if (t < c.local_start + c.len) return c.global * c.len + (t - c.local_start);
  }
  // zigzag with an odd local_seqlen: the last row belongs to no chunk.
  throw Error("local_seqlen", "an even length for the zigzag layout", std::to_string(local_seqlen));
}

}  // namespace flashkit
