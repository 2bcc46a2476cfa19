// Host entry of the sm80 (FA2-class) forward: f16/bf16 inputs, output in the input dtype or f32,
// the head dims compiled in (FLASHKIT_SM80_FWD_HEAD_DIMS in src/cuda/CMakeLists.txt), K/V from
// contiguous tensors or from cache pages.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "cuda/common/fwd_params.hpp"

namespace flashkit::cuda::sm80 {

bool fwd_has_head_dim(int head_dim);
std::string fwd_head_dims_text();  // "{32, 64, ...}" for error messages

// p.in_dtype f16 or bf16, p.head_dim == p.head_dim_v and compiled in; checked by the caller.
void fwd(const FwdParams& p, cudaStream_t stream);

struct PagedKvParams;  // paged_kv_params.hpp

// The same over K/V in cache pages (FLASHKIT_SM80_FWD_PAGED_HEAD_DIMS); p.batch counts kernel
// sequences (cache sequences * key splits).
bool fwd_paged_has_head_dim(int head_dim);
std::string fwd_paged_head_dims_text();
void fwd_paged(const FwdParams& p, const PagedKvParams& kv, cudaStream_t stream);

}  // namespace flashkit::cuda::sm80
