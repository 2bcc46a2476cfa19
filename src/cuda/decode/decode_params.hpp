// One validated paged-attention call as plain data the decode kernels take by value: pointers,
// strides in elements, sizes, the mask rule. paged_attention.cu builds it; the stage-1 kernel
// (decode_kernel.cuh) and the split merge (split_combine.cu) read it.
#pragma once

#include <cstdint>

#include "core/mask_rules.hpp"
#include "core/problem.hpp"
#include "flashkit/tensor.hpp"

namespace flashkit::cuda {

// Strides of k_pages / v_pages [num_pages, page_size, kv_heads, d].
struct PageStrides {
  std::int64_t page, slot, head;
};

struct PagedParams {
  const void* q;
  void* out;
  float* lse;                                          // null: not asked for
  core::TokenLayout q_layout, out_layout, lse_layout;  // batch_stride 0 when packed

  const void* k_pages;
  const void* v_pages;
  PageStrides k_strides, v_strides;
  const float* k_scale;  // e4m3 pages only: [num_pages, kv_heads]
  const float* v_scale;
  std::int64_t k_scale_page, k_scale_head, v_scale_page, v_scale_head;

  const std::int32_t* block_table;  // [batch, max_pages]
  std::int64_t table_batch, table_page;
  const std::int32_t* seq_lens;
  std::int64_t seq_lens_stride;
  const std::int32_t* cu_seqlens_q;  // null: every sequence has q_len queries
  std::int64_t cu_seqlens_stride;
  const float* alibi_slopes;  // null: no ALiBi
  std::int64_t alibi_batch_stride, alibi_head_stride;

  float* ws_o;           // split-K partial outputs (decode_backend.hpp has the layout); null: v1
  float* ws_lse;         // right after ws_o's block
  std::int64_t ws_rows;  // query rows per split: batch * q_len, or total_q when packed

  // States merged into this call's own before out and lse are written (unsplit calls only;
  // decode_backend.hpp's PriorStates): prior_states of them, 0: none. Query row r (as ws_rows
  // counts them), head h of state s: o at prior_o + s * prior_o_state + r * prior_o_row +
  // h * prior_o_head, lse at prior_lse + s * prior_lse_state + r * prior_lse_row +
  // h * prior_lse_head.
  const float* prior_o;
  const float* prior_lse;
  int prior_states;
  std::int64_t prior_o_state, prior_o_row, prior_o_head;
  std::int64_t prior_lse_state, prior_lse_row, prior_lse_head;

  int batch, q_len;  // q_len: max_seqlen_q when packed
  int heads_q, heads_kv, group, head_dim;
  int page_shift;  // page_size = 1 << page_shift (validation admits powers of two only)
  int num_splits;
  int rows_per_cta, row_tiles;  // query rows (token, head of the group) per CTA, CTAs per group
  int mma_warps;     // 0: the CUDA-core kernel (v2); 2 or 4: the tensor-core kernel (v3), warps/CTA
  float scale;       // softmax scale on q.k
  float scale_log2;  // scale * log2(e): scores in base 2 (core/softmax_state.hpp)
  core::MaskRule mask;
  DType q_dtype, out_dtype;
};

}  // namespace flashkit::cuda
