#include "cuda/common/make_params.hpp"

#include <climits>
#include <cstdint>
#include <string>

#include "core/softmax_state.hpp"
#include "core/validate.hpp"

namespace flashkit::cuda {

FwdParams make_fwd_params(const AttentionProblem& a, const Tensor& out, const Tensor& lse,
                          const core::ProblemDims& d) {
  FwdParams p{};
  p.q = a.q.data();
  p.k = a.k.data();
  p.v = a.v.data();
  p.out = out.data();
  p.lse = lse.defined() ? lse.data_as<float>() : nullptr;
  p.q_layout = core::token_layout(a.q, d.varlen);
  p.k_layout = core::token_layout(a.k, d.varlen);
  p.v_layout = core::token_layout(a.v, d.varlen);
  p.out_layout = core::token_layout(out, d.varlen);
  if (p.lse != nullptr) p.lse_layout = core::lse_layout(lse, d.varlen);
  if (d.varlen) {
    p.cu_seqlens_q = a.varlen.cu_seqlens_q.data_as<const std::int32_t>();
    p.cu_seqlens_k = a.varlen.cu_seqlens_k.data_as<const std::int32_t>();
  }
  const Tensor& slopes = a.mask.alibi_slopes;
  if (slopes.defined()) {
    p.alibi_slopes = slopes.data_as<const float>();
    p.alibi_batch_stride = slopes.rank() == 2 ? slopes.stride(0) : 0;
    p.alibi_head_stride = slopes.stride(slopes.rank() - 1);
  }
  p.batch = int(d.batch);
  p.heads_q = int(d.heads_q);
  p.heads_kv = int(d.heads_kv);
  p.seqlen_q = int(d.seqlen_q);
  p.seqlen_k = int(d.seqlen_k);
  p.head_dim = int(d.head_dim);
  p.head_dim_v = int(d.head_dim_v);
  p.scale = d.scale;
  p.scale_log2 = float(double(d.scale) * core::kLog2e);
  p.mask = d.mask;
  p.in_dtype = a.q.dtype();
  p.out_dtype = out.dtype();
  return p;
}

void check_index_ranges(const AttentionProblem& a, const core::ProblemDims& d) {
  const std::int64_t limit = INT_MAX;
  if (a.q.size(0) > limit || d.seqlen_q > limit) {
    core::fail("q.shape", "fewer than 2^31 tokens on cuda", a.q.shape_str());
  }
  if (a.k.size(0) > limit || d.seqlen_k > limit) {
    core::fail("k.shape", "fewer than 2^31 tokens on cuda", a.k.shape_str());
  }
  if (d.batch > 65535)
    core::fail("q.shape[0]", "a batch <= 65535 on cuda", std::to_string(d.batch));
  if (d.heads_q > 65535)
    core::fail("q.shape[-2]", "<= 65535 heads on cuda", std::to_string(d.heads_q));
}

}  // namespace flashkit::cuda
