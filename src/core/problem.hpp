// A validated attention call reduced to plain numbers, and the addressing of one sequence inside
// the (possibly packed) tensors. Backends receive these; they never re-derive shapes.
#pragma once

#include <cstdint>

#include "core/host_device.hpp"
#include "core/mask_rules.hpp"
#include "flashkit/attention.hpp"

namespace flashkit::core {

struct ProblemDims {
  std::int64_t batch = 0;
  std::int64_t seqlen_q = 0;  // max over the batch with varlen
  std::int64_t seqlen_k = 0;
  std::int64_t heads_q = 0;
  std::int64_t heads_kv = 0;
  std::int64_t head_dim = 0;    // d of q and k
  std::int64_t head_dim_v = 0;  // d of v and out
  bool varlen = false;
  double scale = 0.0;  // softmax scale applied to q.k (kernels round it to their precision)
  MaskRule mask;
  std::int64_t group() const { return heads_q / heads_kv; }  // query heads per KV head
};

// Strides of a [batch, tokens, heads, dim] tensor, or of a packed [tokens, heads, dim] one with
// batch_stride = 0 (sequence b then starts at token cu_seqlens[b]).
struct TokenLayout {
  std::int64_t batch_stride, token_stride, head_stride;
};
TokenLayout token_layout(const Tensor& t, bool varlen);

// Strides of the lse tensor: [batch, heads, tokens] or packed [heads, total_tokens].
TokenLayout lse_layout(const Tensor& lse, bool varlen);

// Where sequence b lives: its first token's index in the packed dim (0 without varlen) and its
// lengths.
struct SeqSpan {
  std::int64_t q_start, len_q, k_start, len_k;
};

// Element offset of (batch b, token t of that sequence, head h) in a tensor with layout `lay`.
FLASHKIT_HD std::int64_t element_offset(const TokenLayout& lay, std::int64_t b, std::int64_t start,
                                        std::int64_t t, std::int64_t h) {
  return b * lay.batch_stride + (start + t) * lay.token_stride + h * lay.head_stride;
}

}  // namespace flashkit::core
