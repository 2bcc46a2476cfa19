// One paged-attention test case: a random KV cache whose sequences own shuffled, non-contiguous
// pages (unused pages and the slots past each sequence's end hold NaN, so a read of the wrong
// token shows), the queries, and the same problem as a contiguous packed attention case for the
// contiguous oracle.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attention_case.hpp"
#include "flashkit/paged.hpp"
#include "host_tensor.hpp"

namespace flashkit::testing {

struct PagedSpec {
  DType kv_dtype = DType::bf16;  // f32, f16, bf16 or e4m3 (with per-page-per-head scales)
  DType q_dtype = DType::bf16;
  std::int64_t page_size = 16;
  std::int64_t heads_q = 4, heads_kv = 1, head_dim = 32;
  std::int64_t head_dim_v = 0;  // 0: same as head_dim
  std::vector<std::int64_t> seq_lens{1, 37, 300};
  // Queries per sequence (the last q_lens[b] tokens). Without `packed` all must be equal.
  std::vector<std::int64_t> q_lens{1, 1, 1};
  bool packed = false;
  bool causal = true;
  std::int64_t window_left = -1, window_right = -1, prefix_len = 0;
  float softcap = 0.0f;
  std::optional<float> softmax_scale;  // default 1/sqrt(head_dim)
  bool alibi = false;
  bool strided = false;  // pages, q and outputs as views into larger allocations
  std::uint32_t seed = 1;

  std::int64_t batch() const { return std::int64_t(seq_lens.size()); }
  std::int64_t dim_v() const { return head_dim_v > 0 ? head_dim_v : head_dim; }
  std::string name() const;
};

struct PagedCase {
  PagedSpec spec;
  std::int64_t num_pages = 0, max_pages = 0, total_q = 0, max_q = 0;
  HostTensor q, k_pages, v_pages, k_scale, v_scale, block_table, seq_lens, cu_seqlens_q;
  HostTensor alibi_slopes;
  std::vector<std::vector<std::int32_t>> pages;  // page ids of each sequence, in token order

  std::vector<std::int64_t> out_shape() const;  // like q, with the head dim of v
  std::vector<std::int64_t> lse_shape() const;  // [batch, heads_q, q_len] or [heads_q, total_q]
  PagedKV kv() const;
  PagedAttentionArgs args(const Tensor& out, const Tensor& lse, Algo algo, int num_splits) const;
  // Dequantised element e of token t, KV head h of sequence b (what every path must see).
  double k_at(std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t e) const;
  double v_at(std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t e) const;
};
PagedCase make_paged_case(const PagedSpec& spec);

// Outputs in logical order; lse always as [heads_q, total_q] (the packed order) so that batch and
// packed calls compare alike.
struct PagedResult {
  std::vector<double> out, lse;
};
// Runs paged_attention on poisoned outputs of `out_dtype`.
PagedResult run_paged(const PagedCase& c, Algo algo, int num_splits, DType out_dtype,
                      const Tensor& workspace = Tensor());
// Contiguous attention_forward(Algo::reference) in f64 on the gathered, dequantised K/V.
PagedResult contiguous_oracle(const PagedCase& c);
// A contiguous case of `dtype` holding the gathered values, for plain_forward's tolerance.
CaseData contiguous_case(const PagedCase& c, DType dtype);

// max |a - b|; infinite when either holds a NaN or they disagree on -inf.
double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace flashkit::testing
