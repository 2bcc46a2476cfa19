// CUDA errors become flashkit::Error with the runtime's message, so a failed launch never passes
// silently.
#pragma once

#include <cuda_runtime.h>

namespace flashkit::cuda {

// Throws flashkit::Error("<what>: <CUDA error name>: <message>") when `status` is not success.
void check_cuda(cudaError_t status, const char* what);

// After a kernel launch: picks up launch-configuration errors (cudaGetLastError).
inline void check_launch(const char* kernel) {
  check_cuda(cudaGetLastError(), kernel);
}

}  // namespace flashkit::cuda
