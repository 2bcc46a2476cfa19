// Multi-head latent attention (MLA, DeepSeek-V2/V3) against a paged latent cache, in the
// absorbed form that decoding uses.
//
// MLA caches one row per token for all heads: the compressed latent c (latent_dim wide, 512 in
// DeepSeek-V3) and the decoupled rotary key k_rope (rope_dim, 64), already rotated. Head h's key
// is [W_UK[h] c ; k_rope] and its value W_UV[h] c. Absorbing W_UK into the query
// (q_latent[h] = W_UK[h]^T q_nope[h]) turns the score into q_latent[h].c + q_rope[h].k_rope, a dot
// product with the cached row itself, and the output into sum_j p_j c_j, a latent the caller
// multiplies by W_UV[h]. So every query head attends to one shared KV head whose keys are the
// whole row (latent_dim + rope_dim) and whose values are its first latent_dim columns: MQA with
// d = 576 and d_v = 512 that reads each cached token once for all heads.
//
// Prefill is cheaper un-absorbed: expand K and V per head from c and call attention_forward with
// d = qk_nope_dim + rope_dim and d_v = v_head_dim (192 and 128 in DeepSeek-V3), which it takes.
#pragma once

#include <cstdint>
#include <optional>

#include "flashkit/attention.hpp"
#include "flashkit/tensor.hpp"

namespace flashkit {

// The latent cache. Token t of sequence b lives in page block_table[b, t / page_size] at slot
// t % page_size; its row is c (latent_dim) then k_rope (rope_dim). FlashMLA's layout without its
// size-1 head dim.
struct MlaCache {
  Tensor pages;        // [num_pages, page_size, latent_dim + rope_dim]: f32 / f16 / bf16 or e4m3
  Tensor scale;        // f32 [num_pages] for e4m3 pages: value = stored * scale[page]
  Tensor block_table;  // i32 [batch, max_pages]
  Tensor seq_lens;     // i32 [batch]: tokens in the cache for each sequence
};

struct MlaDecodeArgs {
  // [batch, q_len, heads, latent_dim + rope_dim]: the absorbed queries, q_latent then the rotated
  // q_rope, of the last q_len tokens of each sequence (already appended). Or packed
  // [total_q, heads, latent_dim + rope_dim] with cu_seqlens_q (i32 [batch + 1]) and max_seqlen_q.
  Tensor q;
  Tensor cu_seqlens_q;
  std::int64_t max_seqlen_q = 0;
  MlaCache cache;
  std::int64_t latent_dim = 512;  // a row's first latent_dim columns are the values
  Tensor out;                     // like q with latent_dim columns: sum_j p_j c_j per head
  Tensor lse;                     // optional f32 [batch, heads, q_len] ([heads, total_q] packed)
  // Required: the model's 1/sqrt(qk_nope_dim + rope_dim) (times DeepSeek's YaRN factor), which
  // no width of these tensors gives.
  std::optional<float> softmax_scale;
  // Bottom-right: query i of q_len sees keys up to seq_len - q_len + i (several tokens decoded at
  // once: speculative or multi-token prediction).
  bool causal = false;
  int num_splits = 0;           // as in PagedAttentionArgs: 0 lets the plan choose, 1 unsplit
  Tensor workspace;             // as in PagedAttentionArgs, with head_dim_v = latent_dim
  Algo algo = Algo::automatic;  // automatic, or reference (the fp64 oracle)
  void* stream = nullptr;
};

// Writes new tokens' rows (c then the rotated k_rope) into their pages: rows
// [batch, n_new, latent_dim + rope_dim] go to token positions start_pos[b] ..
// start_pos[b] + n_new - 1 of sequence b. e4m3 pages store value / scale[page], rounded to
// nearest even and saturated at +-448.
struct MlaAppendArgs {
  Tensor rows;
  Tensor start_pos;  // i32 [batch]
  MlaCache cache;    // seq_lens is not read
  void* stream = nullptr;
};

// MLA runs on the CPU backend; CUDA tensors get a flashkit::Error naming q.device.
void mla_decode(const MlaDecodeArgs& args);
void mla_append(const MlaAppendArgs& args);

}  // namespace flashkit
