// Cascade attention on the CPU against plain paged attention over each request's prefix + suffix
// (the fp64 paged oracle, the fast path, and the plain reference of the input dtype). The plain
// cache comes from make_paged_case with every request's prefix overwritten by request 0's, so
// the prefix is really shared; the cascade reads request 0's prefix pages as the shared sequence
// and a second pool in which each suffix starts at slot 0 of its own pages (what a serving cache
// holds when the prefix ends mid-page). Outputs and the workspace are poisoned, unused pages and
// slots hold NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "attention_case.hpp"
#include "expect_error.hpp"
#include "flashkit/cascade.hpp"
#include "paged_case.hpp"

namespace flashkit::testing {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// Two f32 passes over <= 80 keys and an f32 merge: a few ulps of O(1) values.
constexpr double kF32Tol = 4e-6;
constexpr double kLseTol = 1e-5;

struct CascadeSpec {
  DType dtype = DType::bf16;  // pages, q and the low-precision output
  std::int64_t page_size = 16, group = 1, q_len = 1, prefix = 21;
  bool causal = true;
  float softcap = 0.0f;
  std::optional<float> softmax_scale;

  std::string name() const {
    return std::string(dtype_name(dtype)) + " page=" + std::to_string(page_size) +
           " gqa=" + std::to_string(group) + " q_len=" + std::to_string(q_len) +
           " prefix=" + std::to_string(prefix) + (causal ? " causal" : "") +
           (softcap > 0 ? " softcap" : "");
  }
};

PagedSpec plain_spec(const CascadeSpec& s) {
  PagedSpec p;
  p.kv_dtype = p.q_dtype = s.dtype;
  p.page_size = s.page_size;
  p.heads_kv = 2;
  p.heads_q = 2 * s.group;
  p.head_dim = 32;
  // Suffixes: only the new tokens, a few more, and several pages' worth.
  p.seq_lens = {s.prefix + s.q_len, s.prefix + s.q_len + 6, s.prefix + 45};
  p.q_lens.assign(3, s.q_len);
  p.causal = s.causal;
  p.softcap = s.softcap;
  p.softmax_scale = s.softmax_scale;
  p.seed = std::uint32_t(s.page_size * 131 + s.group * 17 + s.q_len * 5 + s.prefix);
  return p;
}

std::int64_t div_up(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

struct CascadeCase {
  CascadeSpec spec;
  PagedCase plain;
  HostTensor shared_table, shared_len;  // request 0's prefix pages in plain's pool
  HostTensor suffix_k, suffix_v, suffix_table, suffix_lens;

  std::int64_t batch() const { return plain.spec.batch(); }
  std::int64_t suffix_len(std::int64_t b) const {
    return plain.spec.seq_lens[std::size_t(b)] - spec.prefix;
  }
  CascadeAttentionArgs args(const Tensor& out, const Tensor& lse, const Tensor& ws) const {
    CascadeAttentionArgs a;
    a.q = plain.q;
    a.shared = plain.kv();
    a.shared.block_table = shared_table;
    a.shared.seq_lens = shared_len;
    a.suffix.k_pages = suffix_k;
    a.suffix.v_pages = suffix_v;
    a.suffix.block_table = suffix_table;
    a.suffix.seq_lens = suffix_lens;
    a.out = out;
    a.lse = lse;
    a.workspace = ws;
    a.softmax_scale = spec.softmax_scale;
    a.mask.causal = spec.causal;
    a.mask.softcap = spec.softcap;
    return a;
  }
};

// Every request's first `prefix` tokens become request 0's.
void share_prefix(PagedCase& c, std::int64_t prefix) {
  const std::int64_t ps = c.spec.page_size, hk = c.spec.heads_kv, d = c.spec.head_dim;
  for (HostTensor* pages : {&c.k_pages, &c.v_pages}) {
    std::vector<double> v = pages->values();
    auto at = [&](std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t e) -> double& {
      const std::int64_t page = c.pages[std::size_t(b)][std::size_t(t / ps)];
      return v[std::size_t(((page * ps + t % ps) * hk + h) * d + e)];
    };
    for (std::int64_t b = 1; b < c.spec.batch(); ++b) {
      for (std::int64_t t = 0; t < prefix; ++t) {
        for (std::int64_t h = 0; h < hk; ++h) {
          for (std::int64_t e = 0; e < d; ++e) at(b, t, h, e) = at(0, t, h, e);
        }
      }
    }
    pages->set_values(v);
  }
}

// The suffixes in a pool of their own, pages handed out in reverse, NaN where no token is.
void build_suffix_pool(CascadeCase& c) {
  const PagedCase& p = c.plain;
  const std::int64_t ps = p.spec.page_size, hk = p.spec.heads_kv, d = p.spec.head_dim;
  std::int64_t per_request = 0;
  for (std::int64_t b = 0; b < c.batch(); ++b) {
    per_request = std::max(per_request, div_up(c.suffix_len(b), ps));
  }
  const std::int64_t num_pages = c.batch() * per_request;
  std::vector<double> k(std::size_t(num_pages * ps * hk * d), kNaN), v = k, table, lens;
  for (std::int64_t b = 0; b < c.batch(); ++b) {
    for (std::int64_t i = 0; i < per_request; ++i) {
      table.push_back(double(num_pages - 1 - (b * per_request + i)));
    }
    lens.push_back(double(c.suffix_len(b)));
    for (std::int64_t t = 0; t < c.suffix_len(b); ++t) {
      const std::int64_t page = num_pages - 1 - (b * per_request + t / ps);
      for (std::int64_t h = 0; h < hk; ++h) {
        for (std::int64_t e = 0; e < d; ++e) {
          const std::size_t i = std::size_t(((page * ps + t % ps) * hk + h) * d + e);
          k[i] = p.k_at(b, c.spec.prefix + t, h, e);
          v[i] = p.v_at(b, c.spec.prefix + t, h, e);
        }
      }
    }
  }
  c.suffix_k = HostTensor(p.spec.kv_dtype, {num_pages, ps, hk, d});
  c.suffix_v = HostTensor(p.spec.kv_dtype, {num_pages, ps, hk, d});
  c.suffix_k.set_values(k);
  c.suffix_v.set_values(v);
  c.suffix_table = HostTensor(DType::i32, {c.batch(), per_request});
  c.suffix_table.set_values(table);
  c.suffix_lens = HostTensor(DType::i32, {c.batch()});
  c.suffix_lens.set_values(lens);
}

CascadeCase make_cascade_case(const CascadeSpec& spec) {
  CascadeCase c{spec, make_paged_case(plain_spec(spec)), {}, {}, {}, {}, {}, {}};
  share_prefix(c.plain, spec.prefix);
  const std::int64_t ps = spec.page_size;
  std::vector<double> row(std::size_t(c.plain.max_pages), -1.0);
  for (std::int64_t i = 0; i < div_up(spec.prefix, ps); ++i) {
    row[std::size_t(i)] = c.plain.pages[0][std::size_t(i)];
  }
  c.shared_table = HostTensor(DType::i32, {1, c.plain.max_pages});
  c.shared_table.set_values(row);
  c.shared_len = HostTensor(DType::i32, {1});
  c.shared_len.set_values({double(spec.prefix)});
  build_suffix_pool(c);
  return c;
}

HostTensor make_workspace(const CascadeCase& c) {
  const PagedSpec& s = c.plain.spec;
  HostTensor ws(DType::f32,
                {cascade_workspace_elems(c.batch(), c.spec.q_len, s.heads_q, s.head_dim)});
  ws.poison();
  return ws;
}

// lse [batch, heads, q_len] -> [heads, batch * q_len], run_paged's order.
std::vector<double> packed_lse(const std::vector<double>& lse, std::int64_t batch,
                               std::int64_t heads, std::int64_t q_len) {
  std::vector<double> packed(lse.size());
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t h = 0; h < heads; ++h) {
      for (std::int64_t i = 0; i < q_len; ++i) {
        packed[std::size_t((h * batch + b) * q_len + i)] =
            lse[std::size_t((b * heads + h) * q_len + i)];
      }
    }
  }
  return packed;
}

PagedResult run_cascade(const CascadeCase& c, DType out_dtype) {
  HostTensor out(out_dtype, c.plain.out_shape());
  HostTensor lse(DType::f32, c.plain.lse_shape());
  HostTensor ws = make_workspace(c);
  out.poison();
  lse.poison();
  cascade_attention(c.args(out, lse, ws));
  return {out.values(), packed_lse(lse.values(), c.batch(), c.plain.spec.heads_q, c.spec.q_len)};
}

std::string within(double err, double tol) {
  return "max error " + std::to_string(err) + " (tolerance " + std::to_string(tol) + ")";
}

void check_cascade(const CascadeSpec& spec) {
  SCOPED_TRACE(spec.name());
  const CascadeCase c = make_cascade_case(spec);
  const PagedResult oracle = run_paged(c.plain, Algo::reference, 1, DType::f64);
  const PagedResult plain = run_paged(c.plain, Algo::automatic, 1, DType::f32);
  const PagedResult cascade = run_cascade(c, DType::f32);

  const double err = max_abs_diff(cascade.out, oracle.out);
  EXPECT_LE(err, kF32Tol) << "cascade vs oracle: " << within(err, kF32Tol);
  const double lse_err = max_abs_diff(cascade.lse, oracle.lse);
  EXPECT_LE(lse_err, kLseTol) << "cascade lse vs oracle: " << within(lse_err, kLseTol);
  const double plain_err = max_abs_diff(cascade.out, plain.out);
  EXPECT_LE(plain_err, kF32Tol) << "cascade vs plain paged: " << within(plain_err, kF32Tol);
  if (spec.prefix == 0) {  // no shared level: exactly the suffix attention
    EXPECT_EQ(max_abs_diff(cascade.out, plain.out), 0.0);
    EXPECT_EQ(max_abs_diff(cascade.lse, plain.lse), 0.0);
  }

  // Output in the input precision: DESIGN.md's rule against a plain reference of that dtype.
  const PagedResult low = run_cascade(c, spec.dtype);
  const ForwardResult ref = plain_forward(contiguous_case(c.plain, spec.dtype));
  EXPECT_EQ(check_close("out", low.out, oracle.out, ref.out, 1e-5), "");
}

// --- the sweep: dtype x page size x GQA x q_len x prefix x causal --------------------------

using SweepParam = std::tuple<DType, std::int64_t, std::int64_t, std::int64_t, std::int64_t, bool>;
class CascadeSweep : public ::testing::TestWithParam<SweepParam> {};

TEST_P(CascadeSweep, MatchesPlainPagedAttention) {
  CascadeSpec s;
  std::tie(s.dtype, s.page_size, s.group, s.q_len, s.prefix, s.causal) = GetParam();
  check_cascade(s);
}

std::string sweep_name(const ::testing::TestParamInfo<SweepParam>& info) {
  const auto [dtype, page_size, group, q_len, prefix, causal] = info.param;
  return std::string(dtype_name(dtype)) + "_page" + std::to_string(page_size) + "_gqa" +
         std::to_string(group) + "_q" + std::to_string(q_len) + "_prefix" + std::to_string(prefix) +
         (causal ? "_causal" : "_full");
}

// Prefixes: empty, shorter than batch * q_len (level 1 in chunks), page-unaligned, and a whole
// number of 16-token pages.
INSTANTIATE_TEST_SUITE_P(Cpu, CascadeSweep,
                         ::testing::Combine(::testing::Values(DType::bf16, DType::f32),
                                            ::testing::Values(1, 16), ::testing::Values(1, 4),
                                            ::testing::Values(1, 3),
                                            ::testing::Values(0, 2, 21, 32), ::testing::Bool()),
                         sweep_name);

TEST(Cascade, SoftcapAndScaleApplyToBothLevels) {
  CascadeSpec s;
  s.softcap = 2.0f;
  s.softmax_scale = 0.7f;
  s.q_len = 3;
  check_cascade(s);
}

// Decode reads q as one sequence through the batch stride alone: q_len == 1 needs no stride over
// tokens, so a [batch, 1, ...] slice of a longer buffer is fine.
TEST(Cascade, DecodeQueriesMayBeAStridedView) {
  CascadeSpec s;
  s.q_len = 1;
  const CascadeCase c = make_cascade_case(s);
  HostTensor q(s.dtype, c.plain.q.shape(), {c.batch(), 2, c.plain.spec.heads_q, 32});
  q.set_values(c.plain.q.values());
  HostTensor out(DType::f32, c.plain.out_shape());
  HostTensor ws = make_workspace(c);
  out.poison();
  CascadeAttentionArgs a = c.args(out, Tensor(), ws);
  a.q = q;
  cascade_attention(a);
  const PagedResult oracle = run_paged(c.plain, Algo::reference, 1, DType::f64);
  const double err = max_abs_diff(out.values(), oracle.out);
  EXPECT_LE(err, kF32Tol) << within(err, kF32Tol);
}

// --- validation: each bad call names the argument and computes nothing ---------------------

class CascadeValidation : public ::testing::Test {
 protected:
  CascadeValidation()
      : c(make_cascade_case(small())),
        out(DType::f32, c.plain.out_shape()),
        lse(DType::f32, c.plain.lse_shape()),
        ws(make_workspace(c)) {
    out.poison();
  }
  static CascadeSpec small() {
    CascadeSpec s;
    s.page_size = 4;
    s.q_len = 3;
    s.prefix = 6;
    return s;
  }
  CascadeAttentionArgs args() const { return c.args(out, lse, ws); }
  void fails(const CascadeAttentionArgs& a, const std::string& argument,
             const std::string& fragment = "") {
    expect_error([&] { cascade_attention(a); }, argument, fragment);
    for (double x : out.values()) ASSERT_TRUE(std::isnan(x)) << "out written by a failed call";
  }

  CascadeCase c;
  HostTensor out, lse, ws;
};

TEST_F(CascadeValidation, ValidCallRuns) {
  cascade_attention(args());
  for (double x : out.values()) ASSERT_FALSE(std::isnan(x));
}

TEST_F(CascadeValidation, CudaTensorsAreRefusedUntilVerified) {
  CascadeAttentionArgs a = args();
  const Tensor& q = a.q;
  a.q = Tensor(q.data(), q.dtype(), {q.size(0), q.size(1), q.size(2), q.size(3)},
               {q.stride(0), q.stride(1), q.stride(2), q.stride(3)}, Device::cuda(0));
  fails(a, "q.device", "not verified");
}

TEST_F(CascadeValidation, MaskPositionsAcrossLevelsAreRefused) {
  CascadeAttentionArgs a = args();
  a.mask.window_left = 4;
  fails(a, "mask.window_left", "not modelled");
  a = args();
  a.mask.window_right = 0;
  fails(a, "mask.window_right");
  HostTensor slopes(DType::f32, {c.plain.spec.heads_q});
  a = args();
  a.mask.alibi_slopes = slopes;
  fails(a, "mask.alibi_slopes");
  a = args();
  a.mask.prefix_len = 2;
  fails(a, "mask.prefix_len");
  a = args();
  a.mask.align = CausalAlign::top_left;
  fails(a, "mask.align");
}

TEST_F(CascadeValidation, SharedSequence) {
  CascadeAttentionArgs a = args();
  a.shared.block_table = c.suffix_table;  // one row per request: not one shared sequence
  fails(a, "shared.block_table.shape[0]", "one shared sequence");
  a = args();
  a.shared.seq_lens = c.suffix_lens;
  fails(a, "shared.seq_lens.shape[0]", "one shared sequence");
  HostTensor negative(DType::i32, {1});
  negative.set_values({-1.0});
  a = args();
  a.shared.seq_lens = negative;
  fails(a, "shared.seq_lens[0]", ">= 9");
  HostTensor too_long(DType::i32, {1});
  too_long.set_values({1000.0});
  a = args();
  a.shared.seq_lens = too_long;
  fails(a, "shared.seq_lens[0]", "longer than its pages");
}

TEST_F(CascadeValidation, LevelCachesAreNamed) {
  CascadeAttentionArgs a = args();
  a.suffix.k_pages = c.plain.q;  // rank 4 but not the pages' shape
  fails(a, "suffix.v_pages.shape[0]", "as k_pages");
  HostTensor f32_pages(DType::f32, c.suffix_k.shape());
  a = args();
  a.shared.k_pages = f32_pages;
  fails(a, "shared.k_pages.dtype");
  std::vector<double> table = c.suffix_table.values();
  table[0] = 1e6;
  HostTensor bad_table(DType::i32, c.suffix_table.shape());
  bad_table.set_values(table);
  a = args();
  a.suffix.block_table = bad_table;
  fails(a, "suffix.block_table[0, 0]", "out of range");
  HostTensor short_lens(DType::i32, {c.batch()});
  short_lens.set_values({3.0, 2.0, 3.0});
  a = args();
  a.suffix.seq_lens = short_lens;
  fails(a, "suffix.seq_lens[1]", "query tokens");
}

TEST_F(CascadeValidation, OutputsAndWorkspace) {
  CascadeAttentionArgs a = args();
  a.workspace = Tensor();
  fails(a, "workspace");
  HostTensor small(DType::f32, {ws.numel() - 1});
  a = args();
  a.workspace = small;
  fails(a, "workspace", "cascade_workspace_elems");
  HostTensor f16(DType::f16, {ws.numel()});
  a = args();
  a.workspace = f16;
  fails(a, "workspace.dtype");
  HostTensor bad_lse(DType::f32, {c.batch(), c.plain.spec.heads_q, 2});
  a = args();
  a.lse = bad_lse;
  fails(a, "lse.shape[2]", "q_len");
  HostTensor bad_out(DType::f32, {c.batch(), 3, c.plain.spec.heads_q, 16});
  a = args();
  a.out = bad_out;
  fails(a, "out.shape[3]", "as in q");
  HostTensor gappy_q(DType::bf16, c.plain.q.shape(), {c.batch(), 4, c.plain.spec.heads_q, 32});
  a = args();
  a.q = gappy_q;  // a stride between requests that is not q_len token strides
  fails(a, "q.stride[0]", "one sequence");
  HostTensor q3(DType::bf16, {c.batch(), 3, c.plain.spec.heads_q});
  a = args();
  a.q = q3;
  fails(a, "q", "rank 4");
}

}  // namespace
}  // namespace flashkit::testing
