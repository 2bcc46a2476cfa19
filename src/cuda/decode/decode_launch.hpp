// Launchers of the decode kernels, for paged_attention.cu: one per KV element type
// (decode_launch.cuh, compiled once per type in decode_{f16,bf16,e4m3}.cu).
#pragma once

#include <cuda_runtime.h>

#include "cuda/decode/decode_params.hpp"

namespace flashkit::cuda::decode {

// The decode kernel (split calls merge in it: split_fold.cuh) for pages of KvElem (__half,
// __nv_bfloat16, __nv_fp8_e4m3).
template <class KvElem>
void launch_decode(const PagedParams& p, cudaStream_t stream);

}  // namespace flashkit::cuda::decode
