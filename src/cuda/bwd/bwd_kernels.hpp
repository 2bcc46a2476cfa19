// The three kernels of the CUDA backward (bwd.hpp), each launched from its own file.
#pragma once

#include <cuda_runtime.h>

#include "cuda/bwd/bwd_params.hpp"

namespace flashkit::cuda {

void launch_bwd_dot(const BwdParams& p, cudaStream_t stream);   // D = rowsum(dO * O)
void launch_bwd_dkdv(const BwdParams& p, cudaStream_t stream);  // dK, dV
void launch_bwd_dq(const BwdParams& p, cudaStream_t stream);    // dQ

}  // namespace flashkit::cuda
