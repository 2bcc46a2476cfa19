// The CUDA-core kernels of the backward (bwd.hpp) and the helpers the tensor-core path shares
// (D, the dQ conversion), each launched from its own file.
#pragma once

#include <cuda_runtime.h>

#include "cuda/bwd/bwd_params.hpp"

namespace flashkit::cuda {

void launch_bwd_dot(const BwdParams& p, cudaStream_t stream);   // D = rowsum(dO * O)
void launch_bwd_dkdv(const BwdParams& p, cudaStream_t stream);  // dK, dV
void launch_bwd_dq(const BwdParams& p, cudaStream_t stream);    // dQ
// dq <- p.dq_accum (fp32) in dq's dtype and strides (tensor-core path).
void launch_bwd_dq_convert(const BwdParams& p, cudaStream_t stream);

}  // namespace flashkit::cuda
