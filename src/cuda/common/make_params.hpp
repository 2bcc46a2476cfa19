// FwdParams from a validated call: the problem (q, k, v, mask, varlen) plus the forward's
// output and lse (written by the forward, read by the backward).
#pragma once

#include "core/problem.hpp"
#include "cuda/common/fwd_params.hpp"
#include "flashkit/attention.hpp"

namespace flashkit::cuda {

FwdParams make_fwd_params(const AttentionProblem& a, const Tensor& out, const Tensor& lse,
                          const core::ProblemDims& d);

// The kernels index tokens with 32-bit ints and put batch and heads in grid y / z (<= 65535).
void check_index_ranges(const AttentionProblem& a, const core::ProblemDims& d);

}  // namespace flashkit::cuda
