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

// 16-byte cp.async copies of whole rows: the data pointer 16-byte aligned and every stride but
// the last a multiple of 16 bytes.
void check_cp_async_rows(const std::string& argument, const Tensor& t);

}  // namespace flashkit::cuda
