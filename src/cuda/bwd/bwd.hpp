// The CUDA backward (FlashAttention-2 order, fp32 on CUDA cores): a baseline that is correct for
// every mask, GQA and varlen, and deterministic by construction (no atomics). Three kernels:
//   D = rowsum(dO * O);
//   dK, dV: one CTA per (sequence, KV head, 16-key block), Q blocks inner, P recomputed from
//           lse; the query heads of a GQA group are summed inside the CTA;
//   dQ:     one CTA per (sequence, query head, 16-query block), KV blocks inner.
// The tensor-core version (mma.sync, FA2's dQ accumulation) is the next step.
#pragma once

#include <cuda_runtime.h>

#include "cuda/bwd/bwd_params.hpp"

namespace flashkit::cuda {

constexpr int kBwdMaxHeadDim = 256;  // 6 fp32 tiles of 16 x d in shared memory: 96 KB at 256

void backward_simt(const BwdParams& p, cudaStream_t stream);

}  // namespace flashkit::cuda
