// The oracle itself: against hand-computed values, an independent textbook implementation, the
// mask rules spelled out, and (backward) central finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "attention_case.hpp"
#include "flashkit/flashkit.hpp"

namespace flashkit::testing {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

TEST(Reference, HandComputedExample) {
  // q = [1, 0]; keys e0, e1; scale 1: scores [1, 0], p = [e, 1] / (e + 1).
  double q[2] = {1, 0}, k[4] = {1, 0, 0, 1}, v[4] = {1, 2, 3, 4}, o[2] = {NAN, NAN};
  float lse = NAN;
  AttentionArgs a;
  a.q = Tensor(q, DType::f64, {1, 1, 1, 2});
  a.k = Tensor(k, DType::f64, {1, 2, 1, 2});
  a.v = Tensor(v, DType::f64, {1, 2, 1, 2});
  a.out = Tensor(o, DType::f64, {1, 1, 1, 2});
  a.lse = Tensor(&lse, DType::f32, {1, 1, 1});
  a.softmax_scale = 1.0f;
  a.algo = Algo::reference;
  attention_forward(a);
  const double e = std::exp(1.0), p0 = e / (e + 1), p1 = 1 / (e + 1);
  EXPECT_NEAR(o[0], p0 * 1 + p1 * 3, 1e-15);
  EXPECT_NEAR(o[1], p0 * 2 + p1 * 4, 1e-15);
  EXPECT_NEAR(lse, std::log(e + 1), 1e-6);
}

// Which keys each query sees, read off the oracle: q = 0 makes attention uniform over the
// visible keys, and v = identity makes out[i][j] = 1 / count exactly where key j is visible.
std::vector<std::vector<int>> visible_keys(std::int64_t lq, std::int64_t lk, const Mask& mask) {
  std::vector<double> q(std::size_t(lq), 0.0), k(std::size_t(lk), 0.5),
      v(std::size_t(lk * lk), 0.0);
  for (std::int64_t j = 0; j < lk; ++j) v[std::size_t(j * lk + j)] = 1.0;
  std::vector<double> o(std::size_t(lq * lk), NAN);
  AttentionArgs a;
  a.q = Tensor(q.data(), DType::f64, {1, lq, 1, 1});
  a.k = Tensor(k.data(), DType::f64, {1, lk, 1, 1});
  a.v = Tensor(v.data(), DType::f64, {1, lk, 1, lk});
  a.out = Tensor(o.data(), DType::f64, {1, lq, 1, lk});
  a.mask = mask;
  a.algo = Algo::reference;
  attention_forward(a);
  std::vector<std::vector<int>> seen(static_cast<std::size_t>(lq));
  for (std::int64_t i = 0; i < lq; ++i) {
    for (std::int64_t j = 0; j < lk; ++j) {
      if (o[std::size_t(i * lk + j)] > 0) seen[std::size_t(i)].push_back(int(j));
    }
  }
  return seen;
}

using Keys = std::vector<std::vector<int>>;

TEST(Reference, CausalAlignments) {
  Mask m;
  m.causal = true;
  m.align = CausalAlign::top_left;
  EXPECT_EQ(visible_keys(2, 4, m), (Keys{{0}, {0, 1}}));
  m.align = CausalAlign::bottom_right;
  EXPECT_EQ(visible_keys(2, 4, m), (Keys{{0, 1, 2}, {0, 1, 2, 3}}));
  // More queries than keys, bottom-right: the first two queries see nothing.
  EXPECT_EQ(visible_keys(4, 2, m), (Keys{{}, {}, {0}, {0, 1}}));
}

TEST(Reference, SlidingWindowAndPrefix) {
  Mask m;
  m.window_left = 1;
  m.window_right = 0;
  EXPECT_EQ(visible_keys(4, 4, m), (Keys{{0}, {0, 1}, {1, 2}, {2, 3}}));
  m.window_left = 0;
  m.window_right = 1;
  EXPECT_EQ(visible_keys(3, 3, m), (Keys{{0, 1}, {1, 2}, {2}}));
  Mask p;
  p.causal = true;
  p.prefix_len = 2;  // prefix-LM: the first two keys are visible to every query
  EXPECT_EQ(visible_keys(4, 4, p), (Keys{{0, 1}, {0, 1}, {0, 1, 2}, {0, 1, 2, 3}}));
}

TEST(Reference, FullyMaskedRowsAreZeroWithMinusInfLse) {
  CaseSpec s;
  s.dtype = DType::f64;
  s.seqlens_q = {6};
  s.seqlens_k = {3};
  s.causal = true;  // bottom-right: queries 0..2 see no key
  const CaseData c = make_case(s);
  const ForwardResult r = oracle_forward(c);
  const std::int64_t d = s.head_dim;
  for (std::int64_t h = 0; h < s.heads_q; ++h) {
    for (std::int64_t i = 0; i < 6; ++i) {
      const double lse = r.lse[std::size_t(h * 6 + i)];
      EXPECT_EQ(lse == kNegInf, i < 3) << "row " << i;
      for (std::int64_t e = 0; e < d; ++e) {
        const double o = r.out[std::size_t((i * s.heads_q + h) * d + e)];
        EXPECT_FALSE(std::isnan(o));
        if (i < 3) {
          EXPECT_EQ(o, 0.0);
        }
      }
    }
  }
}

// The oracle against the test harness's textbook implementation (explicit per-element loops over
// a dense score matrix; with f64 inputs it rounds nothing), over every mask, GQA and varlen.
TEST(Reference, MatchesTextbookAttention) {
  std::vector<CaseSpec> specs;
  for (int mask = 0; mask < 7; ++mask) {
    CaseSpec s;
    s.dtype = DType::f64;
    s.seqlens_q = {9, 0, 1, 13};
    s.seqlens_k = {11, 4, 7, 5};
    s.varlen = true;
    s.heads_q = 4;
    s.heads_kv = mask % 2 ? 1 : 2;
    s.head_dim = 12;
    s.head_dim_v = mask == 3 ? 5 : 0;
    s.seed = std::uint32_t(10 + mask);
    s.causal = mask == 1 || mask == 2 || mask == 6;
    s.align = mask == 1 ? CausalAlign::top_left : CausalAlign::bottom_right;
    if (mask == 3) s.window_left = 2, s.window_right = 1;
    if (mask == 4) s.alibi = true;
    if (mask == 5) s.softcap = 0.7f;
    if (mask == 6) s.prefix_len = 3;
    specs.push_back(s);
  }
  for (const CaseSpec& s : specs) {
    SCOPED_TRACE(s.name());
    const CaseData c = make_case(s);
    const ForwardResult oracle = oracle_forward(c), plain = plain_forward(c);
    ASSERT_EQ(oracle.out.size(), plain.out.size());
    for (std::size_t i = 0; i < oracle.out.size(); ++i) {
      ASSERT_NEAR(oracle.out[i], plain.out[i], 1e-12) << i;
    }
    EXPECT_EQ(check_lse(oracle.lse, plain.lse, 1e-5), "");
  }
}

// Backward: dL/dx for L = sum(dout * out), by central differences in f64.
double loss(const CaseData& c) {
  const ForwardResult r = oracle_forward(c);
  const std::vector<double> g = c.dout.values();
  double l = 0;
  for (std::size_t i = 0; i < g.size(); ++i) l += g[i] * r.out[i];
  return l;
}

void expect_gradient(CaseData& c, HostTensor& x, const std::vector<double>& grad,
                     const char* name) {
  std::vector<double> values = x.values();
  const double h = 1e-6;
  for (std::size_t i = 0; i < values.size(); ++i) {
    const double saved = values[i];
    values[i] = saved + h;
    x.set_values(values);
    const double up = loss(c);
    values[i] = saved - h;
    x.set_values(values);
    const double down = loss(c);
    values[i] = saved;
    x.set_values(values);
    EXPECT_NEAR(grad[i], (up - down) / (2 * h), 1e-7) << name << "[" << i << "]";
  }
}

TEST(Reference, BackwardMatchesFiniteDifferences) {
  for (int variant = 0; variant < 4; ++variant) {
    CaseSpec s;
    s.dtype = DType::f64;
    s.seqlens_q = {3, 4};
    s.seqlens_k = {5, 2};
    s.varlen = true;
    s.heads_q = 2;
    s.heads_kv = variant == 1 ? 1 : 2;  // GQA: dK/dV sum over the group
    s.head_dim = 4;
    s.head_dim_v = 3;
    s.causal = variant == 2;
    s.softcap = variant == 3 ? 0.5f : 0.0f;
    s.alibi = variant == 3;
    s.seed = std::uint32_t(40 + variant);
    SCOPED_TRACE(s.name());
    CaseData c = make_case(s);
    const BackwardResult g = oracle_backward(c);
    expect_gradient(c, c.q, g.dq, "dq");
    expect_gradient(c, c.k, g.dk, "dk");
    expect_gradient(c, c.v, g.dv, "dv");
  }
}

TEST(Reference, BackwardMatchesTextbook) {
  CaseSpec s;
  s.dtype = DType::f64;
  s.seqlens_q = {7, 1, 0};
  s.seqlens_k = {9, 3, 4};
  s.varlen = true;
  s.heads_q = 4;
  s.heads_kv = 2;
  s.head_dim = 8;
  s.causal = true;
  s.window_left = 3;
  const CaseData c = make_case(s);
  const BackwardResult o = oracle_backward(c), p = plain_backward(c);
  for (std::size_t i = 0; i < o.dq.size(); ++i) ASSERT_NEAR(o.dq[i], p.dq[i], 1e-12);
  for (std::size_t i = 0; i < o.dk.size(); ++i) ASSERT_NEAR(o.dk[i], p.dk[i], 1e-12);
  for (std::size_t i = 0; i < o.dv.size(); ++i) ASSERT_NEAR(o.dv[i], p.dv[i], 1e-12);
}

}  // namespace
}  // namespace flashkit::testing
