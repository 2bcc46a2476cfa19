// The TMA descriptors of one sm90 forward call, built on the host per call (a few microseconds of
// driver work, no device sync) and passed to the kernel by value.
#pragma once

#include <cuda.h>

#include "core/problem.hpp"
#include "flashkit/attention.hpp"
#include "flashkit/paged.hpp"

namespace flashkit::cuda::sm90 {

struct FwdMaps {
  CUtensorMap q, k, v, out;
};

// q, k, v and out as 4-d tensors [batch, tokens, heads, d] (packed varlen tensors as batch 1),
// boxes of 64 elements of d by block_m (q), block_n (k, v) or 64 (out: one consumer warpgroup's
// rows) tokens of one head. out's map is left empty when out is f32 (stored from registers).
FwdMaps make_fwd_maps(const AttentionArgs& a, const core::ProblemDims& d, int block_m, int block_n);

// A paged call (fwd_kv_source.cuh): q as [batch, q_len, heads_q / q_pack, q_pack, d] in boxes of
// block_m / q_pack tokens x q_pack heads; K and V pages in boxes of box_rows slots of one head
// (none for box_rows 0: rows copied by cp.async); out (store_out: O has q's dtype and unpacked
// rows) as in make_fwd_maps.
FwdMaps make_paged_fwd_maps(const PagedAttentionArgs& a, int q_pack, int block_m, int box_rows,
                            bool store_out);

}  // namespace flashkit::cuda::sm90
