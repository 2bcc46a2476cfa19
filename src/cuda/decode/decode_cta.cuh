// The work of one decode CTA (the tile scheduler): grid (heads_kv * row_tiles, num_splits,
// batch) -> (sequence, KV head, split, tile of query rows), the rows' tokens and heads, and the
// keys the CTA streams.
//
// Query rows of a KV head are r = i * group + g (token i, head kv_head * group + g): a tile of
// consecutive rows covers all heads of the group for one token first, so a decode step
// (q_len = 1, group 4) is one tile of 4 rows.
#pragma once

#include <cstdint>

#include "core/mask_rules.hpp"
#include "cuda/decode/decode_params.hpp"
#include "cuda/decode/decode_schedule.hpp"

namespace flashkit::cuda::decode {

struct DecodeCta {
  int b, kv_head, split;
  std::int64_t q_start;  // packed row of the sequence's first query (0 without cu_seqlens_q)
  int q_len, seq_len;    // this sequence's queries and cached tokens
  int row0, rows;        // query rows [row0, row0 + rows) of this KV head; rows <= kRows
  KeySpan keys;          // this split's keys
  bool key_mask;         // test every (row, key) pair, not just the span
};

template <int kRows, int kStepKeys>
__device__ __forceinline__ DecodeCta decode_cta(const PagedParams& p) {
  DecodeCta c;
  c.b = int(blockIdx.z);
  c.split = int(blockIdx.y);
  c.kv_head = int(blockIdx.x) / p.row_tiles;
  c.seq_len = p.seq_lens[c.b * p.seq_lens_stride];
  if (p.cu_seqlens_q != nullptr) {
    c.q_start = p.cu_seqlens_q[c.b * p.cu_seqlens_stride];
    c.q_len = int(p.cu_seqlens_q[(c.b + 1) * p.cu_seqlens_stride] - c.q_start);
  } else {
    c.q_start = 0;
    c.q_len = p.q_len;
  }
  c.row0 = (int(blockIdx.x) % p.row_tiles) * kRows;
  const int left = c.q_len * p.group - c.row0;  // < kRows rows in the last tile; <= 0 past it
  c.rows = left < 0 ? 0 : (left < kRows ? left : kRows);
  if (c.rows == 0) {
    c.keys = {0, 0};
    c.key_mask = false;
    return c;
  }
  const int tok_first = c.row0 / p.group, tok_last = (c.row0 + c.rows - 1) / p.group;
  c.keys = split_span(visible_span(p.mask, c.q_len, c.seq_len, tok_first, tok_last), c.split,
                      p.num_splits, kStepKeys);
  c.key_mask = needs_key_mask(p.mask, tok_first, tok_last);
  return c;
}

// Row r of the tile (rows past c.rows repeat the last real one: computed, never stored).
struct QueryRow {
  int token, head;
  std::int64_t diag;  // causal diagonal of the token (core/mask_rules.hpp)
};

__device__ __forceinline__ QueryRow query_row(const PagedParams& p, const DecodeCta& c, int r) {
  const int row = c.row0 + (r < c.rows ? r : c.rows - 1);
  QueryRow q;
  q.token = row / p.group;
  q.head = c.kv_head * p.group + row % p.group;
  q.diag = q.token + core::diagonal_shift(p.mask, c.q_len, c.seq_len);
  return q;
}

}  // namespace flashkit::cuda::decode
