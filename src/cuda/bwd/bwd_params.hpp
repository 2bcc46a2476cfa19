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
  // [q_tokens, heads_q, head_dim] fp32, zeroed, summed into with atomics by the dK/dV kernel;
  // null: dQ comes from the deterministic dQ kernel instead. Token of (b, i): q_start + i with
  // varlen, b * seqlen_q + i without.
  float* dq_accum;
  std::int64_t q_tokens;  // batch * seqlen_q, or the packed token count with varlen
};

FLASHKIT_HD std::int64_t dq_accum_row(const BwdParams& p, int b, const core::SeqSpan& sp,
                                      std::int64_t i, int h) {
  const std::int64_t token =
      p.f.cu_seqlens_q != nullptr ? sp.q_start + i : std::int64_t(b) * p.f.seqlen_q + i;
  return (token * p.f.heads_q + h) * p.f.head_dim;
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
