// Checks of every public call. Each failure throws flashkit::Error naming the argument, what was
// expected and what was got. Backends add only their own limits (head dims, dtypes) on top.
#pragma once

#include <cstdint>
#include <string>

#include "core/problem.hpp"
#include "flashkit/attention.hpp"

namespace flashkit::core {

ProblemDims validate_forward(const AttentionArgs& args);
ProblemDims validate_backward(const BackwardArgs& args);

struct MergeDims {
  std::int64_t states, tokens, heads, head_dim;
};
MergeDims validate_merge(const MergeArgs& args);

// Helpers the backends use for their own limits, so every message has one shape.
[[noreturn]] void fail(const std::string& argument, const std::string& expected,
                       const std::string& got);
void expect_dtype_in(const std::string& argument, const Tensor& t,
                     std::initializer_list<DType> allowed);

}  // namespace flashkit::core
