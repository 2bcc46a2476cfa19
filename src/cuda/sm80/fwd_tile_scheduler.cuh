// Which query tile a CTA of the sm80 forward owns. Grid: x = query tiles, y = query heads,
// z = sequences. Tiles are handed out last first: under a causal mask the last tiles see the most
// keys, so starting them first keeps the tail of the grid short (FA2 does the same).
#pragma once

#include "core/problem.hpp"
#include "cuda/common/fwd_params.hpp"

namespace flashkit::cuda::sm80 {

struct FwdTile {
  int batch, head, head_kv;
  int m_block;
  core::SeqSpan span;
  // Rows of this tile inside the sequence: [row_begin, row_end); empty when the sequence
  // (varlen) is shorter than the grid assumed.
  int row_begin, row_end;
  __device__ bool empty() const { return row_begin >= row_end; }
};

template <int kBlockM>
__device__ __forceinline__ FwdTile fwd_tile(const FwdParams& p) {
  FwdTile t;
  t.batch = blockIdx.z;
  t.head = blockIdx.y;
  t.head_kv = t.head / p.group();  // GQA: a head index mapping, no K/V copies
  t.m_block = gridDim.x - 1 - blockIdx.x;
  t.span = sequence_span(p, t.batch);
  t.row_begin = t.m_block * kBlockM;
  const int end = t.row_begin + kBlockM;
  t.row_end = end < t.span.len_q ? end : int(t.span.len_q);
  return t;
}

}  // namespace flashkit::cuda::sm80
