// Host entry of the tensor-core (mma.sync, FA2-class) backward: f16/bf16 inputs, d_v = d in the
// compiled list (FLASHKIT_SM80_BWD_HEAD_DIMS in src/cuda/CMakeLists.txt), 16-byte aligned rows.
#pragma once

#include <cuda_runtime.h>

#include "cuda/bwd/bwd_params.hpp"

namespace flashkit::cuda::sm80 {

bool bwd_has_head_dim(int head_dim);

// The shared memory a dK/dV CTA may use on the current device, which picks its tile shape
// (sm80_bwd_tile_shape.hpp): the device's opt-in limit, or less when FLASHKIT_BWD_SMEM_LIMIT_KB
// is set (so the shapes of a 163 KB A100 run, and are tested, on an H200). Throws
// flashkit::Error naming the variable for a value that is not a positive integer.
int bwd_smem_limit();

// D = rowsum(dO * O), then dK, dV and dQ: through fp32 atomics into a zeroed accumulator and a
// conversion pass, or (deterministic) through the dQ kernel with no atomics at all.
void bwd(const BwdParams& p, bool deterministic, cudaStream_t stream);

}  // namespace flashkit::cuda::sm80
