// The CUDA backend: entry points that src/core/dispatch.cpp calls for tensors on a CUDA device
// (already validated by core/validate.hpp). Each adds the limits of the kernels it picks, and
// throws flashkit::Error naming the argument before anything is launched.
#pragma once

#include <cstdint>
#include <vector>

#include "core/problem.hpp"
#include "core/validate.hpp"
#include "flashkit/attention.hpp"
#include "flashkit/info.hpp"

namespace flashkit::cuda {

// Algo::automatic and fa2 run the sm80 FA2-class kernel for f16/bf16 (sm80+; the sm90 one where
// it applies); f32 inputs run the FA2-order kernel on CUDA cores in fp32 (fwd_fp32.cu), FA1's
// above d 256. naive and fa1 run the lineage kernels.
void forward(const AttentionArgs& args, const core::ProblemDims& dims);
void backward(const BackwardArgs& args, const core::ProblemDims& dims);
void merge(const MergeArgs& args, const core::MergeDims& dims);

// Every CUDA device this process sees (none, without a driver).
std::vector<DeviceInfo> devices();

// flashkit::scratch_memory / release_scratch_memory over the scratch pools of
// common/stream_buffer.hpp: the bytes they reserve, and handing their unused memory back. Neither
// touches the CUDA runtime before some call has created a pool.
std::uint64_t scratch_reserved_bytes();
void release_scratch();
inline constexpr std::uint64_t kScratchKeepBytesPerDevice = std::uint64_t(1) << 30;  // 1 GiB

}  // namespace flashkit::cuda
