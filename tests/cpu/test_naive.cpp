// The naive three-step forward (Algo::naive) against the fp64 oracle, with DESIGN.md's tolerance
// rule, outputs poisoned first: every mask, dtypes, GQA/MQA, varlen, strided tensors, the shapes
// that reach the register tiles' tails, and the clear error when S and P cannot be allocated.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "attention_case.hpp"
#include "flashkit/flashkit.hpp"

namespace flashkit::testing {
namespace {

// Small absolute slack on top of twice the plain same-precision reference's error.
double atol_of(DType dtype) {
  return dtype == DType::f32 ? 1e-6 : 1e-5;
}

void expect_matches_oracle(const CaseData& c, const AttentionArgs& args, const HostTensor& out,
                           const HostTensor& lse) {
  attention_forward(args);
  const ForwardResult oracle = oracle_forward(c), plain = plain_forward(c);
  EXPECT_EQ(check_close("out", out.values(), oracle.out, plain.out, atol_of(c.spec.dtype)), "");
  EXPECT_EQ(check_lse(lse.values(), oracle.lse, 1e-4), "");
}

void expect_naive_matches_oracle(const CaseSpec& spec) {
  SCOPED_TRACE(spec.name());
  const CaseData c = make_case(spec);
  HostTensor out(spec.dtype, c.out_shape()), lse(DType::f32, c.lse_shape());
  out.poison();
  lse.poison();
  expect_matches_oracle(c, c.forward_args(out, lse, Algo::naive), out, lse);
}

// Seven mask settings over one varlen batch with an empty query and an empty key sequence.
CaseSpec masked_varlen(int mask, DType dtype) {
  CaseSpec s;
  s.dtype = dtype;
  s.seqlens_q = {9, 0, 1, 13, 5};
  s.seqlens_k = {11, 4, 7, 5, 0};
  s.varlen = true;
  s.heads_q = 4;
  s.heads_kv = mask % 2 ? 1 : 2;
  s.head_dim = 12;
  s.head_dim_v = mask == 3 ? 5 : 0;
  s.seed = std::uint32_t(100 + mask);
  s.causal = mask == 1 || mask == 2 || mask == 6;
  s.align = mask == 1 ? CausalAlign::top_left : CausalAlign::bottom_right;
  if (mask == 3) s.window_left = 2, s.window_right = 1;
  if (mask == 4) s.alibi = true;
  if (mask == 5) s.softcap = 0.7f;
  if (mask == 6) s.prefix_len = 3;
  return s;
}

TEST(Naive, EveryMaskWithVarlenAndGqa) {
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (int mask = 0; mask < 7; ++mask) expect_naive_matches_oracle(masked_varlen(mask, dtype));
  }
}

// Past one key chunk (256) with a partial vector of keys, 4-row groups plus a row tail, and head
// dims with and without a partial vector: every path of the register tiles.
TEST(Naive, LongRowsAndTileTails) {
  for (const std::int64_t d : {64, 40}) {
    CaseSpec s;
    s.seqlens_q = {70, 70};
    s.seqlens_k = {300, 300};
    s.heads_q = 4;
    s.heads_kv = 2;
    s.head_dim = d;
    s.head_dim_v = d == 64 ? 0 : 24;
    s.causal = true;
    s.alibi = true;
    s.seed = std::uint32_t(d);
    expect_naive_matches_oracle(s);
  }
}

TEST(Naive, HalfPrecisionWithScaleAndSoftcap) {
  for (const DType dtype : {DType::f16, DType::bf16}) {
    CaseSpec s;
    s.dtype = dtype;
    s.seqlens_q = {33};
    s.seqlens_k = {47};
    s.heads_q = 6;
    s.heads_kv = 3;
    s.head_dim = 32;
    s.softmax_scale = 0.4f;
    s.softcap = 5.0f;
    s.window_left = 10;
    expect_naive_matches_oracle(s);
  }
}

// q, k, v and out as views into larger allocations (padded heads and head dims), lse too.
TEST(Naive, StridedTensors) {
  CaseSpec s;
  s.seqlens_q = {17, 17};
  s.seqlens_k = {29, 29};
  s.heads_q = 4;
  s.heads_kv = 2;
  s.head_dim = 16;
  s.causal = true;
  const CaseData c = make_case(s);
  const auto padded = [](const HostTensor& t) {
    std::vector<std::int64_t> shape, alloc;
    for (int i = 0; i < t.view().rank(); ++i) shape.push_back(t.view().size(i));
    alloc = shape;
    alloc[2] += 1;  // heads
    alloc[3] += 8;  // head dim
    HostTensor strided(t.dtype(), shape, alloc);
    strided.poison();
    strided.set_values(t.values());
    return strided;
  };
  const HostTensor q = padded(c.q), k = padded(c.k), v = padded(c.v);
  std::vector<std::int64_t> out_alloc = c.out_shape(), lse_alloc = c.lse_shape();
  out_alloc[2] += 3;
  lse_alloc[1] += 2;
  HostTensor out(s.dtype, c.out_shape(), out_alloc), lse(DType::f32, c.lse_shape(), lse_alloc);
  out.poison();
  lse.poison();
  AttentionArgs a = c.forward_args(out, lse, Algo::naive);
  a.q = q;
  a.k = k;
  a.v = v;
  expect_matches_oracle(c, a, out, lse);
}

// S and P for a 2^23-token maximum length are 2^49 bytes, beyond any address space: the call
// must fail with a flashkit::Error that says so, not crash. (Varlen lets max_seqlen exceed the
// one real token, so the test itself allocates almost nothing.)
TEST(Naive, WorkspaceTooLargeIsAClearError) {
  CaseSpec s;
  s.seqlens_q = {1};
  s.seqlens_k = {1};
  s.varlen = true;
  s.heads_q = 1;
  s.heads_kv = 1;
  s.head_dim = 1;
  const CaseData c = make_case(s);
  HostTensor out(s.dtype, c.out_shape());
  AttentionArgs a = c.forward_args(out, Tensor(), Algo::naive);
  a.varlen.max_seqlen_q = std::int64_t(1) << 23;
  a.varlen.max_seqlen_k = std::int64_t(1) << 23;
  try {
    attention_forward(a);
    FAIL() << "expected flashkit::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "algo");
    EXPECT_NE(std::string(e.what()).find("naive workspace of 524288.0 GiB"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace flashkit::testing
