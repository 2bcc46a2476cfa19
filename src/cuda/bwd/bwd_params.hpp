// One validated backward call as plain data: the forward's problem (q, k, v, o, lse, mask,
// scale) plus dO, the gradients and the workspaces: D = rowsum(dO * O) and the tensor-core
// path's fp32 dQ accumulator.
#pragma once

#include "core/host_device.hpp"
#include "core/problem.hpp"
#include "cuda/common/fwd_params.hpp"
#include "flashkit/tensor.hpp"

namespace flashkit::cuda {

struct BwdParams {
  FwdParams f;  // f.out is the forward's O (read), f.lse its lse (read, required)
  const void* dout;
  void* dq;
  void* dk;
  void* dv;
  core::TokenLayout dout_layout, dq_layout, dk_layout, dv_layout;
  DType dq_dtype, dk_dtype, dv_dtype;
  float* d_rows;  // [batch * heads_q, seqlen_q]
  // fp32, zeroed, summed into with atomics by the dK/dV kernel (layout: dq_accum_offset);
  // null: dQ comes from the deterministic dQ kernel instead.
  float* dq_accum;
  std::int64_t q_tokens;  // batch * seqlen_q, or the packed token count with varlen
};

// The dQ accumulator is laid out for the dK/dV kernel's reductions. A warp adds half an mma.sync
// fragment at a time: 8 query rows x 8 columns, lane (g, t) holding row g, columns 2t and 2t + 1.
// With rows heads_q * d floats apart those 256 bytes lie on 8 L2 lines; here they are contiguous
// (2 lines). Per query head, workspace rows come in groups of 8, and a group's 8 * d floats are
// d / 8 blocks of [8 rows][8 floats]. Sequence b's query i is workspace row
// round_up(t0, 8) + 8 b + i, t0 its first token (q_start with varlen, b * seqlen_q without): every
// sequence starts on a group and ends before the next one starts (the gap is at least 1 row).
FLASHKIT_HD std::int64_t dq_accum_rows(const BwdParams& p) {
  return (p.q_tokens + 7) / 8 * 8 + 8 * std::int64_t(p.f.batch);
}

FLASHKIT_HD std::int64_t dq_accum_floats(const BwdParams& p) {
  return dq_accum_rows(p) * p.f.heads_q * p.f.head_dim;
}

// Workspace row of query 0 of sequence b (a multiple of 8).
FLASHKIT_HD std::int64_t dq_accum_first_row(const BwdParams& p, int b, const core::SeqSpan& sp) {
  const std::int64_t t0 = p.f.cu_seqlens_q != nullptr ? sp.q_start : std::int64_t(b) * p.f.seqlen_q;
  return (t0 + 7) / 8 * 8 + 8 * std::int64_t(b);
}

// Float offset of column e of query i of (sequence b, query head h); head_dim % 8 == 0.
FLASHKIT_HD std::int64_t dq_accum_offset(const BwdParams& p, int b, const core::SeqSpan& sp,
                                         std::int64_t i, int h, int e) {
  const std::int64_t row = dq_accum_first_row(p, b, sp) + i;
  const std::int64_t group_start = h * dq_accum_rows(p) + row / 8 * 8;
  return group_start * p.f.head_dim + (e / 8) * 64 + (row % 8) * 8 + e % 8;
}

// Row r of the [batch * heads_q, seqlen_q] D array (and of dq) as sequence b, head h and query i
// of that sequence; false when i is past the sequence's length.
FLASHKIT_HD bool query_row(const FwdParams& p, std::int64_t r, int& b, int& h, std::int64_t& i,
                           core::SeqSpan& sp) {
  const std::int64_t bh = r / p.seqlen_q;
  i = r % p.seqlen_q;
  b = int(bh / p.heads_q);
  h = int(bh % p.heads_q);
  sp = sequence_span(p, b);
  return i < sp.len_q;
}

}  // namespace flashkit::cuda
