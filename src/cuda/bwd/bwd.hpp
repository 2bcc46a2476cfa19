// The CUDA-core backward (FlashAttention-2 order, fp32 on CUDA cores): the path of f32 inputs,
// of d_v != d and of rows the tensor-core path cannot copy with cp.async (sm80_bwd.hpp takes
// every other call). Correct for every mask, GQA and varlen, and deterministic by construction
// (no atomics). Three kernels:
//   D = rowsum(dO * O);
//   dK, dV: one CTA per (sequence, KV head, 16-key block), Q blocks inner, P recomputed from
//           lse; the query heads of a GQA group are summed inside the CTA;
//   dQ:     one CTA per (sequence, query head, 16-query block), KV blocks inner.
#pragma once

#include <cuda_runtime.h>

#include "cuda/bwd/bwd_params.hpp"

namespace flashkit::cuda {

constexpr int kBwdMaxHeadDim = 256;  // 6 fp32 tiles of 16 x d in shared memory: 96 KB at 256

void backward_simt(const BwdParams& p, cudaStream_t stream);

}  // namespace flashkit::cuda
