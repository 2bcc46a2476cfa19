// Host entry of the tensor-core (mma.sync, FA2-class) backward: f16/bf16 inputs, d_v = d in the
// compiled list (FLASHKIT_SM80_BWD_HEAD_DIMS in src/cuda/CMakeLists.txt), 16-byte aligned rows.
#pragma once

#include <cuda_runtime.h>

#include "cuda/bwd/bwd_params.hpp"

namespace flashkit::cuda::sm80 {

bool bwd_has_head_dim(int head_dim);

// D = rowsum(dO * O), then dK, dV and dQ: through fp32 atomics into a zeroed accumulator and a
// conversion pass, or (deterministic) through the dQ kernel with no atomics at all.
void bwd(const BwdParams& p, bool deterministic, cudaStream_t stream);

}  // namespace flashkit::cuda::sm80
