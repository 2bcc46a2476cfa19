#include "core/validate.hpp"

#include "core/checks.hpp"

#include <cmath>
#include <vector>

#include "flashkit/error.hpp"

namespace flashkit::core {

void fail(const std::string& argument, const std::string& expected, const std::string& got) {
  throw Error(argument, expected, got);
}

void expect_dtype_in(const std::string& argument, const Tensor& t,
                     std::initializer_list<DType> allowed) {
  std::string names;
  for (DType d : allowed) {
    if (d == t.dtype()) return;
    names += names.empty() ? "" : ", ";
    names += dtype_name(d);
  }
  fail(argument + ".dtype", "one of {" + names + "}", dtype_name(t.dtype()));
}

namespace {

void expect_float_input(const std::string& name, const Tensor& t) {
  expect_dtype_in(name, t, {DType::f64, DType::f32, DType::f16, DType::bf16});
}

void expect_output_dtype(const std::string& name, const Tensor& t) {
  expect_dtype_in(name, t, {DType::f64, DType::f32, DType::f16, DType::bf16});
}

// A [.., tokens, heads, dim] tensor: rank 4 (batch) or 3 (packed varlen).
void expect_token_tensor(const std::string& name, const Tensor& t, bool varlen,
                         const Device& device) {
  expect_defined(name, t);
  expect_rank(name, t, varlen ? 3 : 4);
  expect_device(name, t, device);
  expect_layout(name, t);
  expect_data(name, t);
}

// Reads cu_seqlens (host memory only) and checks 0 = c[0] <= c[1] <= ... <= total, each length
// within max_len. Device-resident arrays are checked by the device backend.
void check_cu_seqlens_values(const std::string& name, const Tensor& cu, std::int64_t total,
                             std::int64_t max_len, const std::string& max_name) {
  if (!cu.device().is_cpu()) return;
  const auto* c = cu.data_as<const std::int32_t>();
  const std::int64_t n = cu.size(0);
  const std::int64_t s = cu.stride(0);
  if (c[0] != 0) fail(name + "[0]", "0", num(c[0]));
  for (std::int64_t i = 1; i < n; ++i) {
    const std::int64_t prev = c[(i - 1) * s], cur = c[i * s];
    if (cur < prev) {
      fail(name + "[" + num(i) + "]", "non-decreasing offsets (>= " + num(prev) + ")", num(cur));
    }
    if (cur - prev > max_len) {
      fail(name, "every sequence length <= " + max_name + " = " + num(max_len),
           "length " + num(cur - prev) + " for sequence " + num(i - 1));
    }
  }
  if (c[(n - 1) * s] > total) {
    fail(name + "[" + num(n - 1) + "]", "<= " + num(total) + " (the packed token count)",
         num(c[(n - 1) * s]));
  }
}

// Everything forward and backward check alike: q, k, v, varlen, mask, scale.
ProblemDims check_problem(const AttentionProblem& p) {
  const bool varlen = p.varlen.enabled();
  expect_defined("q", p.q);
  const Device device = p.q.device();
  expect_token_tensor("q", p.q, varlen, device);
  expect_token_tensor("k", p.k, varlen, device);
  expect_token_tensor("v", p.v, varlen, device);
  expect_float_input("q", p.q);
  if (p.k.dtype() != p.q.dtype()) {
    fail("k.dtype", std::string(dtype_name(p.q.dtype())) + " (the dtype of q)",
         dtype_name(p.k.dtype()));
  }
  if (p.v.dtype() != p.q.dtype()) {
    fail("v.dtype", std::string(dtype_name(p.q.dtype())) + " (the dtype of q)",
         dtype_name(p.v.dtype()));
  }
  const int r = varlen ? 3 : 4;
  const int tok = r - 3, head = r - 2, dim = r - 1;  // dim indices of tokens, heads, head dim

  ProblemDims d;
  d.varlen = varlen;
  d.heads_q = p.q.size(head);
  d.heads_kv = p.k.size(head);
  d.head_dim = p.q.size(dim);
  d.head_dim_v = p.v.size(dim);
  if (d.head_dim < 1) fail("q.shape[" + num(dim) + "]", "a head dim >= 1", num(d.head_dim));
  if (d.head_dim_v < 1) fail("v.shape[" + num(dim) + "]", "a head dim >= 1", num(d.head_dim_v));
  expect_size("k", p.k, dim, d.head_dim, "the head dim of q");
  if (d.heads_q < 1) fail("q.shape[" + num(head) + "]", "at least 1 head", num(d.heads_q));
  if (d.heads_kv < 1) fail("k.shape[" + num(head) + "]", "at least 1 head", num(d.heads_kv));
  expect_size("v", p.v, head, d.heads_kv, "the heads of k");
  if (d.heads_q % d.heads_kv != 0) {
    fail("k.shape[" + num(head) + "]",
         "a divisor of heads_q = " + num(d.heads_q) + " (GQA groups must be whole)",
         num(d.heads_kv));
  }
  expect_size("v", p.v, tok, p.k.size(tok), "the tokens of k");

  if (varlen) {
    const Varlen& vl = p.varlen;
    expect_defined("varlen.cu_seqlens_q", vl.cu_seqlens_q);
    expect_defined("varlen.cu_seqlens_k", vl.cu_seqlens_k);
    for (const auto* pair : {&vl.cu_seqlens_q, &vl.cu_seqlens_k}) {
      const std::string name =
          pair == &vl.cu_seqlens_q ? "varlen.cu_seqlens_q" : "varlen.cu_seqlens_k";
      expect_rank(name, *pair, 1);
      expect_dtype_in(name, *pair, {DType::i32});
      expect_device(name, *pair, device);
      expect_data(name, *pair);
      if (pair->size(0) < 1) fail(name, "batch + 1 >= 1 offsets", "0");
    }
    d.batch = vl.cu_seqlens_q.size(0) - 1;
    expect_size("varlen.cu_seqlens_k", vl.cu_seqlens_k, 0, d.batch + 1,
                "batch + 1, the length of cu_seqlens_q");
    if (vl.max_seqlen_q < 0) fail("varlen.max_seqlen_q", ">= 0", num(vl.max_seqlen_q));
    if (vl.max_seqlen_k < 0) fail("varlen.max_seqlen_k", ">= 0", num(vl.max_seqlen_k));
    d.seqlen_q = vl.max_seqlen_q;
    d.seqlen_k = vl.max_seqlen_k;
    check_cu_seqlens_values("varlen.cu_seqlens_q", vl.cu_seqlens_q, p.q.size(0), d.seqlen_q,
                            "varlen.max_seqlen_q");
    check_cu_seqlens_values("varlen.cu_seqlens_k", vl.cu_seqlens_k, p.k.size(0), d.seqlen_k,
                            "varlen.max_seqlen_k");
  } else {
    d.batch = p.q.size(0);
    d.seqlen_q = p.q.size(1);
    d.seqlen_k = p.k.size(1);
    expect_size("k", p.k, 0, d.batch, "the batch of q");
    expect_size("v", p.v, 0, d.batch, "the batch of q");
  }

  if (p.softmax_scale && !std::isfinite(*p.softmax_scale)) {
    fail("softmax_scale", "a finite number", std::to_string(*p.softmax_scale));
  }
  d.scale = p.softmax_scale ? double(*p.softmax_scale) : 1.0 / std::sqrt(double(d.head_dim));
  d.mask = check_mask(p.mask, d.batch, d.heads_q, device);
  return d;
}

// out / dq / dk / dv: the given shape, a float dtype, the device of q.
void expect_like(const std::string& name, const Tensor& t, const Tensor& like,
                 std::int64_t last_dim, const Device& device, bool varlen) {
  expect_token_tensor(name, t, varlen, device);
  expect_output_dtype(name, t);
  for (int i = 0; i < like.rank() - 1; ++i) {
    expect_size(name, t, i, like.size(i), "as in " + like.shape_str());
  }
  expect_size(name, t, like.rank() - 1, last_dim, "the head dim");
}

void expect_lse(const std::string& name, const Tensor& lse, const ProblemDims& d,
                std::int64_t total_q, const Device& device) {
  expect_dtype_in(name, lse, {DType::f32});
  expect_device(name, lse, device);
  expect_data(name, lse);
  if (d.varlen) {
    expect_rank(name, lse, 2);
    expect_size(name, lse, 0, d.heads_q, "heads_q");
    expect_size(name, lse, 1, total_q, "total_q, the packed query tokens");
  } else {
    expect_rank(name, lse, 3);
    expect_size(name, lse, 0, d.batch, "batch");
    expect_size(name, lse, 1, d.heads_q, "heads_q");
    expect_size(name, lse, 2, d.seqlen_q, "seqlen_q");
  }
  if (lse.size(lse.rank() - 1) > 1 && lse.stride(lse.rank() - 1) != 1) {
    fail(name + ".stride[" + num(lse.rank() - 1) + "]", "1 (contiguous over tokens)",
         num(lse.stride(lse.rank() - 1)));
  }
}

}  // namespace

ProblemDims validate_forward(const AttentionArgs& args) {
  ProblemDims d = check_problem(args);
  const Device device = args.q.device();
  expect_defined("out", args.out);
  expect_like("out", args.out, args.q, d.head_dim_v, device, d.varlen);
  if (args.lse.defined()) expect_lse("lse", args.lse, d, args.q.size(0), device);
  return d;
}

ProblemDims validate_backward(const BackwardArgs& args) {
  ProblemDims d = check_problem(args);
  const Device device = args.q.device();
  expect_defined("out", args.out);
  expect_like("out", args.out, args.q, d.head_dim_v, device, d.varlen);
  expect_defined("dout", args.dout);
  expect_like("dout", args.dout, args.q, d.head_dim_v, device, d.varlen);
  expect_defined("lse", args.lse);
  expect_lse("lse", args.lse, d, args.q.size(0), device);
  expect_defined("dq", args.dq);
  expect_like("dq", args.dq, args.q, d.head_dim, device, d.varlen);
  expect_defined("dk", args.dk);
  expect_like("dk", args.dk, args.k, d.head_dim, device, d.varlen);
  expect_defined("dv", args.dv);
  expect_like("dv", args.dv, args.v, d.head_dim_v, device, d.varlen);
  return d;
}

MergeDims validate_merge(const MergeArgs& args) {
  expect_defined("states_o", args.states_o);
  const Device device = args.states_o.device();
  expect_rank("states_o", args.states_o, 4);
  expect_float_input("states_o", args.states_o);
  expect_layout("states_o", args.states_o);
  expect_data("states_o", args.states_o);
  MergeDims m{args.states_o.size(0), args.states_o.size(1), args.states_o.size(2),
              args.states_o.size(3)};

  expect_defined("states_lse", args.states_lse);
  expect_rank("states_lse", args.states_lse, 3);
  expect_dtype_in("states_lse", args.states_lse, {DType::f32});
  expect_device("states_lse", args.states_lse, device);
  expect_data("states_lse", args.states_lse);
  expect_size("states_lse", args.states_lse, 0, m.states, "states, as in states_o");
  expect_size("states_lse", args.states_lse, 1, m.tokens, "tokens, as in states_o");
  expect_size("states_lse", args.states_lse, 2, m.heads, "heads, as in states_o");
  for (int i = 0; i < 3; ++i) {
    if (args.states_lse.stride(i) < 0) {
      fail("states_lse.stride[" + num(i) + "]", "a non-negative stride",
           num(args.states_lse.stride(i)));
    }
  }

  expect_defined("out", args.out);
  expect_rank("out", args.out, 3);
  expect_output_dtype("out", args.out);
  expect_device("out", args.out, device);
  expect_layout("out", args.out);
  expect_data("out", args.out);
  expect_size("out", args.out, 0, m.tokens, "tokens, as in states_o");
  expect_size("out", args.out, 1, m.heads, "heads, as in states_o");
  expect_size("out", args.out, 2, m.head_dim, "head dim, as in states_o");
  if (args.out_lse.defined()) {
    expect_rank("out_lse", args.out_lse, 2);
    expect_dtype_in("out_lse", args.out_lse, {DType::f32});
    expect_device("out_lse", args.out_lse, device);
    expect_data("out_lse", args.out_lse);
    expect_size("out_lse", args.out_lse, 0, m.tokens, "tokens, as in states_o");
    expect_size("out_lse", args.out_lse, 1, m.heads, "heads, as in states_o");
  }
  return m;
}

}  // namespace flashkit::core
