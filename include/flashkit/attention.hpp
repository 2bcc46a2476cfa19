// Exact attention entry points: forward, backward, and merging partial (o, lse) states.
//
// Layout is FlashAttention's: q [batch, seqlen_q, heads_q, d], k [batch, seqlen_k, heads_kv, d],
// v [batch, seqlen_k, heads_kv, d_v], out [batch, seqlen_q, heads_q, d_v]; any strides with unit
// stride on the last dim. heads_q must be a multiple of heads_kv (GQA/MQA): query head h reads
// KV head h / (heads_q / heads_kv). With varlen (cu_seqlens set) the batch dim is dropped and
// sequences are packed: q [total_q, heads_q, d], sequence b owns rows cu_seqlens_q[b] ..
// cu_seqlens_q[b + 1].
//
// The backend follows the tensors' device; inside it the best algorithm for the hardware is
// picked unless `algo` names one (benchmarks use that to compare the lineage steps).
#pragma once

#include <cstdint>
#include <optional>

#include "flashkit/tensor.hpp"

namespace flashkit {

// Which query position the causal diagonal starts at when seqlen_q != seqlen_k.
//   top_left:     query i sees keys j <= i.
//   bottom_right: query i sees keys j <= i + seqlen_k - seqlen_q (the last query sees every key;
//                 what decoding and chunked prefill need, FlashAttention >= 2.1's convention).
enum class CausalAlign : std::uint8_t { top_left, bottom_right };

// Which keys each query may see, and how scores are shaped. For query i and key j of one
// sequence, with shift = (seqlen_k - seqlen_q) for bottom_right and 0 for top_left, plus
// diagonal_offset, and diag = i + shift:
//   causal:         j <= diag
//   window:         diag - window_left <= j <= diag + window_right (-1: unbounded on that side)
//   prefix_lm:      keys j < prefix_len are visible to every query, whatever causal/window say
//   score:          s = scale * q.k; s = softcap * tanh(s / softcap) when softcap > 0;
//                   s -= slope[h] * |diag - j| when alibi_slopes is set.
// A query that sees no key gets output 0 and lse = -inf.
struct Mask {
  bool causal = false;
  CausalAlign align = CausalAlign::bottom_right;
  std::int64_t window_left = -1;
  std::int64_t window_right = -1;
  std::int64_t prefix_len = 0;
  float softcap = 0.0f;
  // Added to shift: queries that sit diagonal_offset positions after the keys' start, e.g. one
  // chunk of a longer sequence against another chunk of it (ring attention's chunk pairs). Within
  // +-2^31 on CUDA; the paged and cascade calls require 0.
  std::int64_t diagonal_offset = 0;
  // Optional f32 [heads_q] or [batch, heads_q], on the tensors' device.
  Tensor alibi_slopes;
};

// Packed variable-length batches. Both cu_seqlens are i32 [batch + 1], non-decreasing, starting
// at 0, on the tensors' device; max_seqlen_q/k bound every sequence's length.
struct Varlen {
  Tensor cu_seqlens_q;
  Tensor cu_seqlens_k;
  std::int64_t max_seqlen_q = 0;
  std::int64_t max_seqlen_k = 0;

  bool enabled() const { return cu_seqlens_q.defined() || cu_seqlens_k.defined(); }
};

// Algorithm override (benchmarks and tests). automatic picks the best one present.
enum class Algo : std::uint8_t {
  automatic,
  reference,  // CPU only: fp64 two-pass softmax, the oracle every other path is tested against
  naive,      // three steps with S = QK^T and P = softmax(S) materialised in memory
  fa1,        // FlashAttention-1 loop order (KV blocks outer, O rescaled in memory each step)
  fa2,        // FlashAttention-2 loop order (Q blocks outer, O in registers, one final divide)
  fa3,        // Hopper: TMA + WGMMA + warp specialization
};
const char* algo_name(Algo algo) noexcept;

// What forward and backward share.
struct AttentionProblem {
  Tensor q, k, v;
  std::optional<float> softmax_scale;  // default 1/sqrt(d)
  Mask mask;
  Varlen varlen;
  bool deterministic = false;  // bit-identical results across runs (backward's reductions)
  Algo algo = Algo::automatic;
  void* stream = nullptr;  // cudaStream_t for CUDA tensors; ignored on the CPU
};

struct AttentionArgs : AttentionProblem {
  Tensor out;  // [.., seqlen_q, heads_q, d_v]; f32, f16 or bf16 (f64 on the CPU)
  Tensor lse;  // optional f32 [batch, heads_q, seqlen_q] ([heads_q, total_q] with varlen),
               // natural-log log-sum-exp of the scaled, masked scores
};

// Gradients of out = attention(q, k, v) given dout. out and lse are the forward's results; the
// backward recomputes P from lse and uses D = rowsum(dout * out).
struct BackwardArgs : AttentionProblem {
  Tensor out, lse, dout;
  Tensor dq, dk, dv;  // same shapes as q, k, v; f32 or the input dtype
};

// Merge S partial attention states over disjoint key sets into one:
//   lse = log(sum_s exp(lse_s)),  o = sum_s exp(lse_s - lse) * o_s.
// states_o [S, tokens, heads, d] (f32/f16/bf16/f64), states_lse f32 [S, tokens, heads];
// out [tokens, heads, d], out_lse optional f32 [tokens, heads]. A state with lse = -inf (saw no
// key) contributes nothing; if every state is empty the output is 0 and lse = -inf.
struct MergeArgs {
  Tensor states_o, states_lse;
  Tensor out, out_lse;
  void* stream = nullptr;
};

void attention_forward(const AttentionArgs& args);
void attention_backward(const BackwardArgs& args);
void merge_states(const MergeArgs& args);

}  // namespace flashkit
