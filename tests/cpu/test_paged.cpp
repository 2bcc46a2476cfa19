// Paged attention on the CPU. The paged oracle is checked against the contiguous oracle on the
// gathered K/V (so the block-table walk, the bottom-right causal alignment and the dequantisation
// are right), then the fast path (v1 and split-K) against the paged oracle: over page sizes, GQA
// ratios, sequence lengths that are 1 or not a multiple of the page size, bf16 / f16 / e4m3 pages,
// decode and chunked prefill, packed queries, masks, strided views and a caller's workspace. All
// caches use shuffled page ids with NaN in every unused page and slot, and outputs are poisoned.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "attention_case.hpp"
#include "flashkit/error.hpp"
#include "flashkit/paged.hpp"
#include "paged_case.hpp"

namespace flashkit::testing {
namespace {

// fp32 accumulation over a few hundred keys of O(1) values: measured <= 1.8e-7 (a few ulps).
constexpr double kF32Tol = 2e-6;
constexpr double kLseTol = 1e-5;

std::string within(double err, double tol) {
  return "max error " + std::to_string(err) + " (tolerance " + std::to_string(tol) + ")";
}

// The fast path (v1 with f32 output and with the q dtype's output, split-K with f32 output)
// against the paged oracle, and the paged oracle against the contiguous oracle.
void check_case(const PagedSpec& spec, int splits = 3) {
  SCOPED_TRACE(spec.name());
  const PagedCase c = make_paged_case(spec);
  const PagedResult oracle = run_paged(c, Algo::reference, 1, DType::f64);
  const PagedResult contiguous = contiguous_oracle(c);
  const double oracle_err = max_abs_diff(oracle.out, contiguous.out);
  EXPECT_LE(oracle_err, 1e-12) << "paged oracle vs contiguous oracle: "
                               << within(oracle_err, 1e-12);
  EXPECT_LE(max_abs_diff(oracle.lse, contiguous.lse), 1e-6);

  for (int s : {1, splits}) {
    SCOPED_TRACE("num_splits=" + std::to_string(s));
    const PagedResult fast = run_paged(c, Algo::automatic, s, DType::f32);
    const double err = max_abs_diff(fast.out, oracle.out);
    EXPECT_LE(err, kF32Tol) << within(err, kF32Tol);
    const double lse_err = max_abs_diff(fast.lse, oracle.lse);
    EXPECT_LE(lse_err, kLseTol) << "lse " << within(lse_err, kLseTol);
  }

  // Output in the input precision: DESIGN.md's rule against a plain reference of that dtype.
  const PagedResult fast = run_paged(c, Algo::automatic, 1, spec.q_dtype);
  const ForwardResult plain = plain_forward(contiguous_case(c, spec.q_dtype));
  EXPECT_EQ(check_close("out", fast.out, oracle.out, plain.out, 1e-5), "");
}

// --- the sweep: page size x GQA x KV dtype x q_len -----------------------------------------

using SweepParam = std::tuple<std::int64_t, std::int64_t, DType, std::int64_t>;
class PagedSweep : public ::testing::TestWithParam<SweepParam> {};

TEST_P(PagedSweep, FastAndOracleAgree) {
  const auto [page_size, group, kv_dtype, q_len] = GetParam();
  PagedSpec s;
  s.kv_dtype = kv_dtype;
  s.q_dtype = kv_dtype == DType::f16 ? DType::f16 : DType::bf16;
  s.page_size = page_size;
  s.heads_kv = 2;
  s.heads_q = 2 * group;
  s.head_dim = 64;
  s.seq_lens = {q_len, 37, 256, 300};  // the shortest holds only its queries (1 token in decode)
  s.q_lens.assign(4, q_len);
  s.seed = std::uint32_t(page_size * 131 + group * 17 + q_len);
  check_case(s);
}

std::string sweep_name(const ::testing::TestParamInfo<SweepParam>& info) {
  const auto [page_size, group, kv_dtype, q_len] = info.param;
  return "page" + std::to_string(page_size) + "_gqa" + std::to_string(group) + "_" +
         dtype_name(kv_dtype) + "_q" + std::to_string(q_len);
}

INSTANTIATE_TEST_SUITE_P(Cpu, PagedSweep,
                         ::testing::Combine(::testing::Values(1, 16, 64, 256),
                                            ::testing::Values(1, 4, 8),
                                            ::testing::Values(DType::bf16, DType::f16, DType::e4m3),
                                            ::testing::Values(1, 3)),
                         sweep_name);

// --- masks, layouts, splits ------------------------------------------------------------------

PagedSpec decode_spec() {
  PagedSpec s;
  s.page_size = 16;
  s.heads_q = 8;
  s.heads_kv = 2;
  s.head_dim = 64;
  s.seq_lens = {1, 100, 517};
  s.q_lens = {1, 1, 1};
  return s;
}

TEST(PagedMasks, SlidingWindowAndSoftcapInDecode) {
  PagedSpec s = decode_spec();
  s.window_left = 40;
  s.softcap = 5.0f;
  check_case(s, 8);  // most splits of the long sequence lie outside the window: empty states
}

TEST(PagedMasks, WindowBothSidesWithoutCausal) {
  PagedSpec s = decode_spec();
  s.causal = false;
  s.q_lens = {4, 4, 4};
  s.seq_lens = {4, 100, 300};
  s.window_left = 7;
  s.window_right = 2;
  check_case(s);
}

TEST(PagedMasks, AlibiAndPrefixInChunkedPrefill) {
  PagedSpec s = decode_spec();
  s.q_lens = {3, 3, 3};
  s.seq_lens = {3, 100, 517};
  s.alibi = true;
  s.window_left = 64;
  s.prefix_len = 20;
  check_case(s, 4);
}

TEST(PagedLayouts, PackedQueriesOfDifferentLengths) {
  PagedSpec s = decode_spec();
  s.packed = true;
  s.seq_lens = {1, 40, 17, 300, 9};
  s.q_lens = {1, 5, 0, 33, 9};  // one sequence adds nothing; one is all queries (prefill)
  check_case(s, 5);
}

TEST(PagedLayouts, StridedViews) {
  PagedSpec s = decode_spec();
  s.strided = true;
  s.q_lens = {2, 2, 2};
  s.seq_lens = {2, 100, 517};
  check_case(s);
}

TEST(PagedLayouts, F32CacheAndHeadDim128) {
  PagedSpec s = decode_spec();
  s.kv_dtype = s.q_dtype = DType::f32;
  s.head_dim = 128;
  s.heads_q = s.heads_kv = 4;  // MHA
  check_case(s);
}

TEST(PagedLayouts, ValueHeadDimDiffersFromKeys) {
  PagedSpec s = decode_spec();
  s.head_dim = 96;
  s.head_dim_v = 40;  // not a multiple of the 16 lanes either
  s.q_lens = {2, 2, 2};
  s.seq_lens = {2, 100, 517};
  check_case(s);
}

TEST(PagedSplits, SplitAndUnsplitAgreeAndPlanChooses) {
  PagedSpec s = decode_spec();
  s.seq_lens = {2000};
  s.q_lens = {1};
  s.heads_kv = 1;
  const PagedCase c = make_paged_case(s);
  const PagedResult v1 = run_paged(c, Algo::automatic, 1, DType::f32);
  for (int splits : {0, 2, 7, 200}) {  // 0: the plan's choice; 200: more splits than pages
    const PagedResult v2 = run_paged(c, Algo::automatic, splits, DType::f32);
    EXPECT_LE(max_abs_diff(v1.out, v2.out), 1e-5) << "num_splits=" << splits;
    EXPECT_LE(max_abs_diff(v1.lse, v2.lse), kLseTol) << "num_splits=" << splits;
  }
}

TEST(PagedSplits, CallersWorkspaceIsUsed) {
  PagedSpec s = decode_spec();
  const PagedCase c = make_paged_case(s);
  const int splits = 4;
  // splits x query rows (3 sequences x 1 token) x heads x (d_v outputs + 1 lse), exactly.
  const std::int64_t need = splits * 3 * s.heads_q * (s.head_dim + 1);
  HostTensor ws(DType::f32, {need});
  ws.poison();
  const PagedResult with_ws = run_paged(c, Algo::automatic, splits, DType::f32, ws);
  const PagedResult oracle = run_paged(c, Algo::reference, 1, DType::f64);
  EXPECT_LE(max_abs_diff(with_ws.out, oracle.out), kF32Tol);
  EXPECT_FALSE(std::isnan(ws.at(0))) << "the workspace was not written";
}

// --- the split plan --------------------------------------------------------------------------

TEST(PagedPlan, LongSingleSequenceSplitsOnAGpu) {
  const PagedSplitPlan p = plan_paged_split(1, 1, 32, 8, 128, 32768, 132);
  EXPECT_GT(p.num_splits, 1);
  EXPECT_EQ(p.workspace_elems, std::int64_t(p.num_splits) * 1 * 1 * 32 * (128 + 1));
  // Each split keeps enough keys to be worth its merge.
  EXPECT_GE(32768 / p.num_splits, 256);
}

TEST(PagedPlan, MqaDecodeSplitsOnTwoThreads) {
  EXPECT_GT(plan_paged_split(1, 1, 8, 1, 128, 32768, 2).num_splits, 1);
}

TEST(PagedPlan, FullMachineOrShortSequencesStayUnsplit) {
  const PagedSplitPlan big = plan_paged_split(256, 1, 32, 8, 128, 32768, 132);
  EXPECT_EQ(big.num_splits, 1);
  EXPECT_EQ(big.workspace_elems, 0);
  EXPECT_EQ(plan_paged_split(1, 1, 32, 8, 128, 300, 132).num_splits, 1);
}

TEST(PagedPlan, WorkspaceGrowsWithQueries) {
  const PagedSplitPlan p = plan_paged_split(2, 4, 16, 2, 64, 8192, 64);
  ASSERT_GT(p.num_splits, 1);
  EXPECT_EQ(p.workspace_elems, std::int64_t(p.num_splits) * 2 * 4 * 16 * 65);
}

TEST(PagedPlan, BadArgumentsNameThemselves) {
  try {
    plan_paged_split(1, 1, 8, 1, 128, 1024, 0);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "plan_paged_split.processors");
  }
}

}  // namespace
}  // namespace flashkit::testing
