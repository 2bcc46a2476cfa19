// Device checks shared by the CUDA entry points.
#pragma once

#include <string>

#include "flashkit/tensor.hpp"

namespace flashkit::cuda {

// The compute capability (major * 10 + minor) of `device`, which must exist and be the current
// device (kernels launch on the current device; switching it behind the caller's back would
// surprise them). Throws flashkit::Error naming `<argument>.device` otherwise.
int current_device_capability(const std::string& argument, const Device& device);

// Streaming multiprocessors of `device` (an existing device; 1 if the query fails).
int multiprocessor_count(const Device& device);

// The most shared memory one CTA may opt in to on the current device, in bytes (0 if the query
// fails, which picks the smallest tile shapes).
int current_device_smem_optin();

// The shared memory a CTA of the sm80-class kernels (forward and backward) may use on the current
// device, which picks their tile shapes (sm80/fwd_tile_shape.hpp, bwd/sm80_bwd_tile_shape.hpp)
// and the decode kernels' CTA shapes (decode/paged_attention.cu):
// current_device_smem_optin(), or less when FLASHKIT_SMEM_LIMIT_KB is set (so the shapes of a
// 163 KB A100 run, and are tested, on an H200). Throws flashkit::Error naming the variable for a
// value that is not a positive integer.
int tile_smem_limit();

// 16-byte cp.async copies of whole rows: the data pointer 16-byte aligned and every stride but
// the last a multiple of 16 bytes.
void check_cp_async_rows(const std::string& argument, const Tensor& t);

}  // namespace flashkit::cuda
