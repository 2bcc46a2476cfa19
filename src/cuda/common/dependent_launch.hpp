// Launching a kernel that may overlap the one before it in its stream (ptx/grid_dependency.cuh):
// the host half of programmatic dependent launch. It is captured into CUDA graphs as a
// programmatic edge, so graph-replayed decode steps keep the overlap.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "cuda/common/cuda_check.hpp"

namespace flashkit::cuda {

// True when kernels may overlap their predecessor on a device of this compute capability
// (major * 10 + minor): sm90 and later, unless FLASHKIT_DEPENDENT_LAUNCH=0 (the plain stream
// order, for profilers and for measuring what the overlap saves). Throws flashkit::Error naming
// the variable for a value other than 0 or 1.
bool dependent_launch_enabled(int capability);

// kernel<<<grid, block, smem, stream>>>(args...), allowed to start early when `overlap`; the
// kernel must then call ptx::wait_for_prior_grid() before it reads its predecessor's output.
template <class... Params, class... Args>
void launch_overlapping(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem,
                        cudaStream_t stream, bool overlap, const char* what, Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = overlap ? &attribute : nullptr;
  config.numAttrs = overlap ? 1 : 0;
  check_cuda(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...), what);
}

}  // namespace flashkit::cuda
