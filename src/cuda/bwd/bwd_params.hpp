// One validated backward call as plain data: the forward's problem (q, k, v, o, lse, mask,
// scale) plus dO, the gradients and the D = rowsum(dO * O) workspace.
#pragma once

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
};

}  // namespace flashkit::cuda
