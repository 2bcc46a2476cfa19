// merge_states: combining partial attention over disjoint key sets.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "attention_case.hpp"
#include "flashkit/flashkit.hpp"

namespace flashkit::testing {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Attention over keys [begin, end) of every sequence of `c` (batch 1), as an (o, lse) state.
ForwardResult attend_to_keys(const CaseData& c, std::int64_t begin, std::int64_t end) {
  const Tensor& k = c.k;
  const Tensor& v = c.v;
  const std::int64_t n = end - begin;
  const auto elem = std::int64_t(dtype_size(k.dtype()));
  Tensor ks(static_cast<char*>(k.data()) + begin * k.stride(1) * elem, k.dtype(),
            {1, n, k.size(2), k.size(3)}, {k.stride(0), k.stride(1), k.stride(2), 1});
  Tensor vs(static_cast<char*>(v.data()) + begin * v.stride(1) * elem, v.dtype(),
            {1, n, v.size(2), v.size(3)}, {v.stride(0), v.stride(1), v.stride(2), 1});
  HostTensor out(DType::f32, c.out_shape()), lse(DType::f32, c.lse_shape());
  AttentionArgs a = c.forward_args(out, lse, Algo::reference);
  a.k = ks;
  a.v = vs;
  attention_forward(a);
  return {out.values(), lse.values()};
}

struct States {
  HostTensor o, lse;
};

// Packs states into [S, tokens, heads, d] / [S, tokens, heads] (lse transposed from the
// attention layout [batch=1, heads, tokens]).
States pack(const std::vector<ForwardResult>& parts, std::int64_t tokens, std::int64_t heads,
            std::int64_t d) {
  const auto s = std::int64_t(parts.size());
  States st{HostTensor(DType::f32, {s, tokens, heads, d}),
            HostTensor(DType::f32, {s, tokens, heads})};
  std::vector<double> o, l;
  for (const auto& p : parts) {
    o.insert(o.end(), p.out.begin(), p.out.end());
    for (std::int64_t t = 0; t < tokens; ++t) {
      for (std::int64_t h = 0; h < heads; ++h) l.push_back(p.lse[std::size_t(h * tokens + t)]);
    }
  }
  st.o.set_values(o);
  st.lse.set_values(l);
  return st;
}

CaseData make_merge_case() {
  CaseSpec s;
  s.seqlens_q = {6};
  s.seqlens_k = {20};
  s.heads_q = 3;
  s.heads_kv = 3;
  s.head_dim = 16;
  return make_case(s);
}

TEST(Merge, TwoHalvesEqualTheWhole) {
  const CaseData c = make_merge_case();
  const ForwardResult whole = attend_to_keys(c, 0, 20);
  const States st = pack({attend_to_keys(c, 0, 7), attend_to_keys(c, 7, 20)}, 6, 3, 16);
  HostTensor out(DType::f32, {6, 3, 16}), out_lse(DType::f32, {6, 3});
  out.poison();
  out_lse.poison();
  merge_states({st.o, st.lse, out, out_lse, nullptr});
  const auto got = out.values();
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], whole.out[i], 2e-6) << i;
  for (std::int64_t t = 0; t < 6; ++t) {
    for (std::int64_t h = 0; h < 3; ++h) {
      EXPECT_NEAR(out_lse.at(t * 3 + h), whole.lse[std::size_t(h * 6 + t)], 2e-6);
    }
  }
}

TEST(Merge, EmptyStateIsTheIdentity) {
  const CaseData c = make_merge_case();
  const ForwardResult part = attend_to_keys(c, 0, 20);
  ForwardResult empty = part;
  for (auto& x : empty.out) x = std::nan("");  // an empty state's o may hold anything
  for (auto& x : empty.lse) x = double(kNegInf);
  const States st = pack({empty, part, empty}, 6, 3, 16);
  HostTensor out(DType::f32, {6, 3, 16});
  out.poison();
  merge_states({st.o, st.lse, out, Tensor(), nullptr});
  const auto got = out.values();
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_FLOAT_EQ(float(got[i]), float(part.out[i]));
}

TEST(Merge, AllEmptyGivesZeroAndMinusInf) {
  HostTensor o(DType::f32, {2, 1, 1, 4}), l(DType::f32, {2, 1, 1}), out(DType::f32, {1, 1, 4}),
      out_lse(DType::f32, {1, 1});
  o.poison();
  l.set_values({double(kNegInf), double(kNegInf)});
  out.poison();
  merge_states({o, l, out, out_lse, nullptr});
  for (double x : out.values()) EXPECT_EQ(x, 0.0);
  EXPECT_EQ(out_lse.at(0), double(kNegInf));
}

TEST(Merge, OrderIndependent) {
  const CaseData c = make_merge_case();
  std::vector<ForwardResult> parts{attend_to_keys(c, 0, 3), attend_to_keys(c, 3, 11),
                                   attend_to_keys(c, 11, 12), attend_to_keys(c, 12, 20)};
  const States forward = pack(parts, 6, 3, 16);
  std::swap(parts[0], parts[3]);
  std::swap(parts[1], parts[2]);
  const States reversed = pack(parts, 6, 3, 16);
  HostTensor a(DType::f32, {6, 3, 16}), b(DType::f32, {6, 3, 16});
  merge_states({forward.o, forward.lse, a, Tensor(), nullptr});
  merge_states({reversed.o, reversed.lse, b, Tensor(), nullptr});
  const auto va = a.values(), vb = b.values();
  const ForwardResult whole = attend_to_keys(c, 0, 20);
  for (std::size_t i = 0; i < va.size(); ++i) {
    EXPECT_NEAR(va[i], vb[i], 1e-6);
    EXPECT_NEAR(va[i], whole.out[i], 2e-6);
  }
}

}  // namespace
}  // namespace flashkit::testing
