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

}  // namespace flashkit::cuda
