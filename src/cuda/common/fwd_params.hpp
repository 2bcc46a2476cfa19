// One validated forward call as plain data a kernel takes by value: pointers, strides in
// elements, sizes, the mask rule and the softmax scale. Every forward kernel (naive, FA1, FA2)
// reads the same struct; cuda_backend.cpp builds it from AttentionArgs and ProblemDims.
#pragma once

#include <cstdint>

#include "core/host_device.hpp"
#include "core/mask_rules.hpp"
#include "core/problem.hpp"
#include "cuda/common/fast_div.hpp"
#include "flashkit/tensor.hpp"

namespace flashkit::cuda {

struct FwdParams {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  float* lse;  // null: not asked for
  core::TokenLayout q_layout, k_layout, v_layout, out_layout, lse_layout;
  const std::int32_t* cu_seqlens_q;  // null without varlen
  const std::int32_t* cu_seqlens_k;
  const float* alibi_slopes;  // null: no ALiBi
  std::int64_t alibi_batch_stride, alibi_head_stride;

  int batch, heads_q, heads_kv, seqlen_q, seqlen_k;  // seqlen_*: the max over the batch
  int head_dim, head_dim_v;
  float scale;       // softmax scale on q.k
  float scale_log2;  // scale * log2(e): scores in base 2 (core/softmax_state.hpp)
  core::MaskRule mask;
  DType in_dtype, out_dtype;
  // The divisors of the sm90 forward's persistent walk (sm90/fwd_tile_scheduler.cuh), set by its
  // launch: units per (sequence, head), heads_q and the GQA group.
  FastDiv walk_span, walk_heads, walk_group;

  FLASHKIT_HD int group() const { return heads_q / heads_kv; }
  FLASHKIT_HD bool has_score_mods() const { return alibi_slopes != nullptr || mask.softcap > 0; }
};

// Where sequence b lives inside the (possibly packed) tensors.
FLASHKIT_HD core::SeqSpan sequence_span(const FwdParams& p, int b) {
  if (p.cu_seqlens_q == nullptr) return {0, p.seqlen_q, 0, p.seqlen_k};
  const std::int64_t q0 = p.cu_seqlens_q[b], k0 = p.cu_seqlens_k[b];
  return {q0, p.cu_seqlens_q[b + 1] - q0, k0, p.cu_seqlens_k[b + 1] - k0};
}

FLASHKIT_HD float alibi_slope(const FwdParams& p, int b, int h) {
  return p.alibi_slopes == nullptr
             ? 0.0f
             : p.alibi_slopes[b * p.alibi_batch_stride + h * p.alibi_head_stride];
}

}  // namespace flashkit::cuda
