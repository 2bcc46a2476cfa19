// Where a finished query row goes: the split-K workspace (stage 1 of v2), or out and lse (v1,
// and stage 2 of v2). The workspace layout is decode_backend.hpp's.
#pragma once

#include <cstdint>

#include "core/problem.hpp"
#include "cuda/common/dtype.cuh"
#include "cuda/decode/decode_params.hpp"

namespace flashkit::cuda::decode {

// Workspace query row of token `token` of sequence b: the packed row with cu_seqlens_q.
__device__ __forceinline__ std::int64_t workspace_row(const PagedParams& p, int b,
                                                      std::int64_t q_start, int token) {
  return p.cu_seqlens_q != nullptr ? q_start + token : std::int64_t(b) * p.q_len + token;
}

// Index of (split, workspace row, head) in the lse block; times head_dim in the o block.
__device__ __forceinline__ std::int64_t workspace_index(const PagedParams& p, int split,
                                                        std::int64_t row, int head) {
  return (std::int64_t(split) * p.ws_rows + row) * p.heads_q + head;
}

// Element e of the output of (sequence b, token, head), and its lse with e == 0.
__device__ __forceinline__ void store_output(const PagedParams& p, int b, std::int64_t q_start,
                                             int token, int head, int e, float o, float lse) {
  store_from_float(p.out, p.out_dtype,
                   core::element_offset(p.out_layout, b, q_start, token, head) + e, o);
  if (e == 0 && p.lse != nullptr) {
    p.lse[core::element_offset(p.lse_layout, b, q_start, token, head)] = lse;
  }
}

}  // namespace flashkit::cuda::decode
