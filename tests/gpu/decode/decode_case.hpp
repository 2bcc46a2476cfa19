// One paged-decode GPU test case: a random KV cache whose sequences own shuffled pages (unused
// pages, unused block-table columns and the slots past each sequence's end hold NaN, so a read of
// the wrong token shows), the queries, the CPU oracle (paged_attention with Algo::reference on
// the same host tensors) and a run on cuda:0 with poisoned outputs and workspace.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "device_tensor.hpp"
#include "flashkit/paged.hpp"
#include "host_tensor.hpp"

namespace flashkit::testing {

struct DecodeSpec {
  DType kv_dtype = DType::bf16;  // f16, bf16 or e4m3 (random per-page-per-head scales)
  DType q_dtype = DType::bf16;   // the dtype of f16/bf16 pages; bf16 or f16 with e4m3
  DType out_dtype = DType::bf16;
  std::int64_t page_size = 16;
  std::int64_t heads_q = 8, heads_kv = 2, head_dim = 128;
  std::vector<std::int64_t> seq_lens{1, 45, 300};
  std::vector<std::int64_t> q_lens{1, 1, 1};  // the last q_lens[b] tokens are the queries
  bool packed = false;                        // cu_seqlens_q (required when q_lens differ)
  bool padded = false;                        // pages, q and out with padded rows (strided)
  bool causal = true;
  std::int64_t window_left = -1, window_right = -1, prefix_len = 0;
  float softcap = 0.0f;
  bool alibi = false;
  std::optional<float> softmax_scale;
  // V values of page p are uniform in +-v_amplitudes[p % size] (e4m3 scales shrink alike): small
  // values put e4m3's products of probability and scale near f16's subnormals.
  std::vector<double> v_amplitudes{1.0};
  double q_amplitude = 1.0;  // q uniform in +-q_amplitude
  std::uint32_t seed = 1;

  std::int64_t batch() const { return std::int64_t(seq_lens.size()); }
  std::string name() const;
};

struct DecodeCase {
  DecodeSpec spec;
  std::int64_t num_pages = 0, max_pages = 0, total_q = 0, max_q = 0;
  HostTensor q, k_pages, v_pages, k_scale, v_scale, block_table, seq_lens, cu_seqlens_q;
  HostTensor alibi_slopes;

  std::vector<std::int64_t> out_shape() const;  // like q
  std::vector<std::int64_t> lse_shape() const;  // [batch, heads_q, q_len] or [heads_q, total_q]
  // The call on this case's host tensors (out, lse and workspace given).
  PagedAttentionArgs args(const Tensor& out, const Tensor& lse, int num_splits,
                          const Tensor& workspace, Algo algo) const;
};
DecodeCase make_decode_case(const DecodeSpec& spec);

// The case's inputs on cuda:0, and the call on them.
struct DeviceDecodeCase {
  explicit DeviceDecodeCase(const DecodeCase& c);
  PagedAttentionArgs args(const DecodeCase& c, const Tensor& out, const Tensor& lse, int num_splits,
                          const Tensor& workspace) const;
  DeviceTensor q, k_pages, v_pages, k_scale, v_scale, block_table, seq_lens, cu_seqlens_q;
  DeviceTensor alibi_slopes;
};

struct DecodeResult {
  std::vector<double> out, lse;  // logical order of out and lse
};

// paged_attention(Algo::reference) on the host: f64 out, f32 lse.
DecodeResult decode_oracle(const DecodeCase& c);

// f32 elements of the workspace for `num_splits` (0: the plan's choice for cuda:0, as the
// dispatch makes it with the block table's capacity standing for the longest sequence).
std::int64_t decode_workspace_elems(const DecodeCase& c, int num_splits);

// paged_attention on cuda:0 with out, lse and the workspace poisoned (num_splits 0: the plan's
// choice). workspace_offset: f32 elements the workspace starts into its buffer (1: not 16-byte
// aligned). Checks the device for errors. workspace_after: where the workspace's values after the
// call go (empty without a workspace).
DecodeResult run_decode_gpu(const DecodeCase& c, int num_splits, int workspace_offset = 0,
                            std::vector<double>* workspace_after = nullptr);

// "" when `got` matches `want` within the output dtype's rounding (one ulp of values below
// out_scale, plus 2e-4 of out_scale for fp32 sums in another order) and lse within 1e-4 (-inf
// exactly); else the worst element. NaN (a poisoned, unwritten element) always fails. out_scale:
// the largest V magnitude (outputs are averages of V rows).
std::string compare_decode(const DecodeResult& got, const DecodeResult& want, DType out_dtype,
                           double out_scale = 1.0);

}  // namespace flashkit::testing
