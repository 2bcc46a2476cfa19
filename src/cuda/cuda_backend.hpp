// The CUDA backend: entry points that src/core/dispatch.cpp calls for tensors on a CUDA device
// (already validated by core/validate.hpp). Each adds the limits of the kernels it picks, and
// throws flashkit::Error naming the argument before anything is launched.
#pragma once

#include <vector>

#include "core/problem.hpp"
#include "core/validate.hpp"
#include "flashkit/attention.hpp"
#include "flashkit/info.hpp"

namespace flashkit::cuda {

// Algo::automatic and fa2 run the sm80 FA2-class kernel for f16/bf16 (sm80+); f32 inputs run the
// FA1-order kernel in fp32 (exact fp32 arithmetic). naive and fa1 run the lineage kernels.
void forward(const AttentionArgs& args, const core::ProblemDims& dims);
void backward(const BackwardArgs& args, const core::ProblemDims& dims);
void merge(const MergeArgs& args, const core::MergeDims& dims);

// Every CUDA device this process sees (none, without a driver).
std::vector<DeviceInfo> devices();

}  // namespace flashkit::cuda
