// The CPU backend: every feature, first. Entry points take validated calls (core/validate.hpp).
#pragma once

#include <vector>

#include "core/problem.hpp"
#include "core/validate.hpp"
#include "flashkit/attention.hpp"

namespace flashkit::cpu {

// Per-sequence spans of a call (reads cu_seqlens, which are host memory on this backend).
std::vector<core::SeqSpan> sequence_spans(const AttentionProblem& p, const core::ProblemDims& d);

// Dispatch on args.algo: reference, naive, or the tiled flash path (automatic / fa2).
void forward(const AttentionArgs& args, const core::ProblemDims& dims);
void backward(const BackwardArgs& args, const core::ProblemDims& dims);
void merge(const MergeArgs& args, const core::MergeDims& dims);

// The fp64 oracle: two-pass softmax in double from the inputs as stored. Backward recomputes the
// forward in double itself (out and lse of args are not read) and uses D = rowsum(dO * O).
void reference_forward(const AttentionArgs& args, const core::ProblemDims& dims);
void reference_backward(const BackwardArgs& args, const core::ProblemDims& dims);

// The naive three-step forward in fp32 with S and P materialised for every (batch, head).
void naive_forward(const AttentionArgs& args, const core::ProblemDims& dims);

// The fast path: tiled online softmax in fp32 (FlashAttention-2 loop order), multi-threaded.
void tiled_forward(const AttentionArgs& args, const core::ProblemDims& dims);
void tiled_backward(const BackwardArgs& args, const core::ProblemDims& dims);

}  // namespace flashkit::cpu
