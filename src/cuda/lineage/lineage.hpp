// The teaching baselines of docs/lineage.md, on the GPU: simple, any head dim, f32/f16/bf16
// inputs, fp32 arithmetic on CUDA cores (no tensor cores), every mask feature.
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/fwd_params.hpp"

namespace flashkit::cuda {

// Three kernels with everything materialised in a workspace: S = scale * Q K^T (masked scores,
// [batch * heads, seqlen_q, seqlen_k] fp32), P = softmax(S) in place, O = P V.
void naive_forward(const FwdParams& p, cudaStream_t stream);

// FlashAttention-1 loop order: one CTA per (sequence, head); KV blocks outer, Q blocks inner; the
// normalised O and the softmax state (m, l) of every row go back to global memory after each KV
// block. Also the fp32-input path of Algo::automatic / fa2 where the CUDA-core FA2 kernel
// (fwd_fp32.hpp) does not fit: head dims above 256, or too little shared memory.
void fa1_forward(const FwdParams& p, cudaStream_t stream);

// Largest head dim the FA1 kernel takes (its K, V and Q blocks must fit in shared memory).
constexpr int kFa1MaxHeadDim = 512;

}  // namespace flashkit::cuda
