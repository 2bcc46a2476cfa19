// Launchers of the decode kernels, for paged_attention.cu: stage 1 per KV element type
// (decode_launch.cuh, compiled once per type in decode_{f16,bf16,e4m3}.cu) and the split merge.
#pragma once

#include <cuda_runtime.h>

#include "cuda/decode/decode_params.hpp"

namespace flashkit::cuda::decode {

// Stage 1 (all of v1) for pages of KvElem (__half, __nv_bfloat16, __nv_fp8_e4m3).
template <class KvElem>
void launch_decode(const PagedParams& p, cudaStream_t stream);

// Stage 2 of v2: merges p.num_splits partial states from the workspace into out and lse.
void launch_split_combine(const PagedParams& p, cudaStream_t stream);

}  // namespace flashkit::cuda::decode
