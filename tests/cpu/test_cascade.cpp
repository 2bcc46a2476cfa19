// Cascade attention on the CPU against plain paged attention over each request's prefix + suffix
// (the fp64 paged oracle, the fast path, and the plain reference of the input dtype), on the
// cases of cascade_case.hpp. Outputs and the workspace are poisoned.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "attention_case.hpp"
#include "cascade_case.hpp"
#include "expect_error.hpp"
#include "flashkit/cascade.hpp"

namespace flashkit::testing {
namespace {

// Two f32 passes over <= 80 keys and an f32 merge: a few ulps of O(1) values.
constexpr double kF32Tol = 4e-6;
constexpr double kLseTol = 1e-5;

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

// Every tensor on q's device (a CUDA q with host block tables would make the kernels read host
// memory); refused before anything runs, with or without a GPU.
TEST_F(CascadeValidation, TensorsOnAnotherDeviceThanQAreRefused) {
  CascadeAttentionArgs a = args();
  const Tensor& q = a.q;
  a.q = Tensor(q.data(), q.dtype(), {q.size(0), q.size(1), q.size(2), q.size(3)},
               {q.stride(0), q.stride(1), q.stride(2), q.stride(3)}, Device::cuda(0));
  fails(a, "shared.block_table.device");
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
  a = args();
  a.mask.diagonal_offset = 1;
  fails(a, "mask.diagonal_offset", "not modelled");
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
  std::vector<std::int64_t> wide = c.suffix_k.shape();
  wide[3] += 8;
  HostTensor wide_v(c.suffix_k.dtype(), wide);
  a = args();
  a.suffix.v_pages = wide_v;
  fails(a, "suffix.v_pages.shape[3]", "cascade needs d_v = d");
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
