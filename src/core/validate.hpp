// Checks of every public call. Each failure throws flashkit::Error naming the argument, what was
// expected and what was got. Backends add only their own limits (head dims, dtypes) on top.
#pragma once

#include <cstdint>
#include <string>

#include "core/paged_problem.hpp"
#include "core/problem.hpp"
#include "flashkit/attention.hpp"
#include "flashkit/paged.hpp"

namespace flashkit::core {

ProblemDims validate_forward(const AttentionArgs& args);
ProblemDims validate_backward(const BackwardArgs& args);

struct MergeDims {
  std::int64_t states, tokens, heads, head_dim;
};
MergeDims validate_merge(const MergeArgs& args);

// Paged attention and append (core/validate_paged.cpp). Host-resident seq_lens, block tables,
// cu_seqlens_q and start positions are read: every page a call touches must exist. When
// args.num_splits is 0 the split plan is made for `processors` (CPU threads or GPU SMs).
PagedDims validate_paged(const PagedAttentionArgs& args, int processors);
AppendDims validate_append(const AppendKVArgs& args);
// The split workspace's size (public in flashkit/paged.hpp), for backends checking args.workspace.
using flashkit::paged_workspace_elems;

// Helpers the backends use for their own limits, so every message has one shape.
[[noreturn]] void fail(const std::string& argument, const std::string& expected,
                       const std::string& got);
void expect_dtype_in(const std::string& argument, const Tensor& t,
                     std::initializer_list<DType> allowed);

}  // namespace flashkit::core
