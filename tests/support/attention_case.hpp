// One attention test case end to end: random inputs, the fp64 oracle, a plain reference in the
// input precision, and the tolerance rule of DESIGN.md:
//   max |kernel - oracle| <= 2 * max |plain - oracle| + atol
// where `plain` is textbook attention whose every product (S, P, O and the backward's dP, dS
// and gradients) is rounded to the input dtype.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "flashkit/attention.hpp"
#include "host_tensor.hpp"

namespace flashkit::testing {

struct CaseSpec {
  DType dtype = DType::f32;
  // One length per sequence. Without varlen every sequence must have the same lengths.
  std::vector<std::int64_t> seqlens_q{64};
  std::vector<std::int64_t> seqlens_k{64};
  bool varlen = false;
  std::int64_t heads_q = 2;
  std::int64_t heads_kv = 2;
  std::int64_t head_dim = 64;
  std::int64_t head_dim_v = 0;  // 0: same as head_dim
  bool causal = false;
  CausalAlign align = CausalAlign::bottom_right;
  std::int64_t window_left = -1;
  std::int64_t window_right = -1;
  std::int64_t prefix_len = 0;
  std::int64_t diagonal_offset = 0;
  float softcap = 0.0f;
  bool alibi = false;
  std::optional<float> softmax_scale;
  std::uint32_t seed = 1;

  std::int64_t dim_v() const { return head_dim_v > 0 ? head_dim_v : head_dim; }
  std::string name() const;  // readable, for failure messages
};

// Host tensors of one case. Inputs are random in [-1, 1) (dout too), rounded to dtype.
struct CaseData {
  CaseSpec spec;
  HostTensor q, k, v, dout;
  HostTensor cu_seqlens_q, cu_seqlens_k;  // i32, only with varlen
  HostTensor alibi_slopes;                // f32 [heads_q], only with alibi
  std::int64_t batch = 0, max_q = 0, max_k = 0, total_q = 0, total_k = 0;

  // Shapes of out / lse for this case ([.., tokens, heads, dim] and [batch, heads, tokens] or
  // [heads, total]).
  std::vector<std::int64_t> out_shape() const;
  std::vector<std::int64_t> lse_shape() const;
  // Argument structs over the given outputs; the problem part (q, k, v, mask, varlen, scale) is
  // this case's.
  AttentionArgs forward_args(const Tensor& out, const Tensor& lse, Algo algo) const;
  BackwardArgs backward_args(const Tensor& out, const Tensor& lse, const Tensor& dq,
                             const Tensor& dk, const Tensor& dv, Algo algo) const;
};
CaseData make_case(const CaseSpec& spec);

struct ForwardResult {
  std::vector<double> out, lse;  // logical order
};
struct BackwardResult {
  std::vector<double> dq, dk, dv;
};

// The CPU oracle (Algo::reference) with f64 outputs.
ForwardResult oracle_forward(const CaseData& c);
BackwardResult oracle_backward(const CaseData& c);
// Textbook attention with every product rounded to the case's dtype. One task per (sequence,
// head) on the CPU backend's thread pool, each sum in the serial order, so the values do not
// depend on the thread count. (Serial, with a strided index per element, it took 10x the
// oracle's time: 5.8 s against 0.54 s for one 2048 x 2048 causal case of 2 heads at d = 128 on
// 2 cores, now 1.0 s: the larger part of a forward test's CPU time before.)
ForwardResult plain_forward(const CaseData& c);
BackwardResult plain_backward(const CaseData& c);

// The tolerance rule over one output. Returns "" when it holds, else a description of the
// worst element. NaN in `got` (an unwritten, poisoned element) always fails.
std::string check_close(const std::string& what, const std::vector<double>& got,
                        const std::vector<double>& oracle, const std::vector<double>& plain,
                        double atol);

// lse: exact match of -inf where the oracle has -inf, else |got - oracle| <= tol.
std::string check_lse(const std::vector<double>& got, const std::vector<double>& oracle,
                      double tol);

}  // namespace flashkit::testing
