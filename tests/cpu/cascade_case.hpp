// One cascade-attention test case (CPU and GPU tests): a plain paged cache from make_paged_case
// with every request's prefix overwritten by request 0's, so the prefix is really shared; the
// cascade reads request 0's prefix pages as the shared sequence and a second pool in which each
// suffix starts at slot 0 of its own pages (what a serving cache holds when the prefix ends
// mid-page), pages handed out in reverse. Unused pages and slots hold NaN.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "flashkit/cascade.hpp"
#include "host_tensor.hpp"
#include "paged_case.hpp"

namespace flashkit::testing {

struct CascadeSpec {
  DType dtype = DType::bf16;  // pages, q and the low-precision output
  std::int64_t page_size = 16, group = 1, q_len = 1, prefix = 21;
  std::int64_t batch = 3, heads_kv = 2, head_dim = 32;
  bool causal = true;
  float softcap = 0.0f;
  std::optional<float> softmax_scale;

  std::string name() const;
};

struct CascadeCase {
  CascadeSpec spec;
  PagedCase plain;
  HostTensor shared_table, shared_len;  // request 0's prefix pages in plain's pool
  HostTensor suffix_k, suffix_v, suffix_table, suffix_lens;

  std::int64_t batch() const { return plain.spec.batch(); }
  std::int64_t suffix_len(std::int64_t b) const {
    return plain.spec.seq_lens[std::size_t(b)] - spec.prefix;
  }
  // The call on this case's host tensors.
  CascadeAttentionArgs args(const Tensor& out, const Tensor& lse, const Tensor& ws) const;
};
CascadeCase make_cascade_case(const CascadeSpec& spec);

// A poisoned f32 workspace of cascade_workspace_elems elements.
HostTensor make_workspace(const CascadeCase& c);

// lse [batch, heads, q_len] -> [heads, batch * q_len], run_paged's order.
std::vector<double> packed_lse(const std::vector<double>& lse, std::int64_t batch,
                               std::int64_t heads, std::int64_t q_len);

}  // namespace flashkit::testing
