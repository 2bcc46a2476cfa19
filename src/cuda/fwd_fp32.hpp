// The fp32-input forward of Algo::automatic / fa2 on CUDA: FlashAttention-2's loop order on CUDA
// cores with fp32 arithmetic (the tensor-core kernels would round q, k, v to 16 bits).
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/fwd_params.hpp"

namespace flashkit::cuda {

// True when the kernel takes these head dims (both <= 256) within `smem_optin` bytes of shared
// memory per CTA (145 KB at d = 256, 73 KB at 128, 40 KB at 64); otherwise FA1's loop
// (lineage/fa1.cu) serves f32 inputs, up to its own head-dim limit.
bool fwd_fp32_runs(int head_dim, int head_dim_v, int smem_optin);

// sm_count: the device's SMs, against which the grid's key splits are chosen.
void fwd_fp32(const FwdParams& p, int sm_count, cudaStream_t stream);

}  // namespace flashkit::cuda
