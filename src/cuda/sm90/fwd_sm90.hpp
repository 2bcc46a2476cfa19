// Host entry of the sm90 (Hopper, FlashAttention-3 class) forward: f16/bf16 inputs, output in
// the input dtype or f32, the head dims compiled in (FLASHKIT_SM90_FWD_HEAD_DIMS in
// src/cuda/CMakeLists.txt), on compute capability 9.0 devices. Built only when the CUDA
// architecture list has 90a (FLASHKIT_HAVE_SM90); otherwise every call takes the sm80 path.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "core/problem.hpp"
#include "cuda/common/fwd_params.hpp"
#include "cuda/sm80/paged_kv_params.hpp"
#include "flashkit/attention.hpp"
#include "flashkit/paged.hpp"

namespace flashkit::cuda::sm90 {

bool fwd_has_head_dim(int head_dim);
std::string fwd_head_dims_text();  // "{64, 128, 256}" for error messages and `flashkit info`

// Checked by the caller: dtypes, head dims (compiled, d_v = d), 16-byte aligned rows, sm 9.0.
void fwd(const AttentionArgs& a, const core::ProblemDims& d, const FwdParams& p,
         cudaStream_t stream);

// Over cache pages, for cuda/paged_fwd.cpp, which checks what fwd does and more: a GQA pack
// dividing fwd_paged_block_m and box_rows, either 0 (rows by cp.async: fwd_paged_rows.cuh) or a
// power of two dividing the page size, fwd_paged_block_n and (with key splits) split_keys (TMA
// boxes: fwd_kv_source.cuh).
int fwd_paged_block_m(int head_dim);  // query rows per tile: 64 at d = 64, 128 otherwise
int fwd_paged_block_n(int head_dim);
// started: recorded once every CTA has begun (PagedFwdOptions::started), or nullptr.
void fwd_paged(const PagedAttentionArgs& a, const FwdParams& p, const sm80::PagedKvParams& kv,
               int box_rows, cudaStream_t stream, cudaEvent_t started);

}  // namespace flashkit::cuda::sm90
