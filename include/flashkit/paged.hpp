// Attention of new query tokens against a paged KV cache: decode (one query token per sequence)
// and chunked prefill / append (several), unsplit (v1: one pass per sequence and KV head) or
// split over the keys (v2: partial (o, lse) per split, then merge_states).
#pragma once

#include <cstdint>
#include <optional>

#include "flashkit/attention.hpp"
#include "flashkit/tensor.hpp"

namespace flashkit {

// The cache as kernels see it. Pages are [num_pages, page_size, kv_heads, d]; sequence b's token
// t lives in page block_table[b, t / page_size] at slot t % page_size.
struct PagedKV {
  Tensor k_pages, v_pages;  // f32 / f16 / bf16, or e4m3 with scales
  Tensor k_scale, v_scale;  // f32 [num_pages, kv_heads] for e4m3 pages: value = stored * scale
  Tensor block_table;       // i32 [batch, max_pages]; slots past a sequence's pages unused
  Tensor seq_lens;          // i32 [batch]: tokens in the cache for each sequence
};

struct PagedAttentionArgs {
  // [batch, q_len, heads_q, d]: the last q_len tokens of each sequence (already appended to the
  // cache), so causal masking is bottom-right aligned. Or packed [total_q, heads_q, d] with
  // cu_seqlens_q (i32 [batch + 1]) and max_seqlen_q when sequences add different counts.
  Tensor q;
  Tensor cu_seqlens_q;
  std::int64_t max_seqlen_q = 0;
  PagedKV kv;
  Tensor out;  // like q, head dim of v
  Tensor lse;  // optional f32 [batch, heads_q, q_len] ([heads_q, total_q] packed)
  std::optional<float> softmax_scale;
  Mask mask;  // causal (bottom-right), window, softcap, alibi; prefix_len too
  // Key splits: 0 lets the plan choose (plan_paged_split), 1 is the unsplit v1 path, > 1 splits
  // every sequence's keys into that many parts merged with merge_states.
  int num_splits = 0;
  // Contiguous f32 scratch of at least paged_workspace_elems() elements (for the num_splits the
  // call resolves to) when splitting on a GPU; the CPU allocates its own when this is undefined.
  Tensor workspace;
  Algo algo = Algo::automatic;
  void* stream = nullptr;
};

// Writes new tokens' K and V into their pages: k_new / v_new [batch, n_new, kv_heads, d] go to
// token positions start_pos[b] .. start_pos[b] + n_new - 1 of sequence b (start_pos i32 [batch]).
// For e4m3 pages the values are divided by the page's scale and rounded to nearest even,
// saturating at +-448. kv.seq_lens is not read: start_pos says where the tokens go.
struct AppendKVArgs {
  Tensor k_new, v_new;
  Tensor start_pos;
  PagedKV kv;
  void* stream = nullptr;
};

// How the keys are split: chosen on the host from the batch shape and the processor count so
// that batch * heads_kv * num_splits fills the machine; fixed workspace so decode can be captured
// in a CUDA graph with varying sequence lengths.
struct PagedSplitPlan {
  int num_splits = 1;
  std::int64_t workspace_elems = 0;  // f32 elements the split path needs
};
PagedSplitPlan plan_paged_split(std::int64_t batch, std::int64_t q_len, std::int64_t heads_q,
                                std::int64_t heads_kv, std::int64_t head_dim_v,
                                std::int64_t max_seq_len, int processors);

// f32 workspace elements of a call with num_splits splits (0 when unsplit): partial outputs and
// lse of every query row and head per split. query_rows: batch * q_len, or total_q when packed.
std::int64_t paged_workspace_elems(std::int64_t num_splits, std::int64_t query_rows,
                                   std::int64_t heads_q, std::int64_t head_dim_v);

void paged_attention(const PagedAttentionArgs& args);
void append_kv(const AppendKVArgs& args);

}  // namespace flashkit
