// The tiled CPU forward (Algo::fa2) against the fp64 oracle under DESIGN.md's tolerance rule,
// over dtypes x head dims x masks x GQA ratios on packed varlen batches, plus the edges: head
// dims 1 and 512, d != d_v, strided inputs, other output dtypes, [batch, heads] ALiBi slopes,
// queries that see no key. The vectorised math helpers are checked on their own first.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "attention_case.hpp"
#include "core/mask_rules.hpp"
#include "core/numeric.hpp"
#include "core/problem.hpp"
#include "cpu/tiled_common.hpp"
#include "cpu/tiled_math.hpp"
#include "flashkit/attention.hpp"
#include "mask_kinds.hpp"

namespace flashkit::testing {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// --- math helpers -------------------------------------------------------------------------

TEST(TiledMath, Exp2IsAccurateAndFlushesBelowRange) {
  double worst = 0;
  for (double x = -125.0; x <= 10.0; x += 0.001) {
    const double got = cpu::tiled::exp2_fast(float(x));
    worst = std::max(worst, std::fabs(got / std::exp2(double(float(x))) - 1.0));
  }
  EXPECT_LT(worst, 4e-7);
  EXPECT_EQ(cpu::tiled::exp2_fast(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(cpu::tiled::exp2_fast(-126.5f), 0.0f);
  EXPECT_EQ(cpu::tiled::exp2_fast(0.0f), 1.0f);
}

TEST(TiledMath, TanhIsAccurateOnBothSidesOfTheSwitch) {
  double worst = 0;
  for (double x = -12.0; x <= 12.0; x += 0.0007) {
    const double got = cpu::tiled::tanh_fast(float(x));
    worst = std::max(worst, std::fabs(got - std::tanh(double(float(x)))));
  }
  EXPECT_LT(worst, 3e-7);
  EXPECT_EQ(cpu::tiled::tanh_fast(0.0f), 0.0f);
  EXPECT_EQ(cpu::tiled::tanh_fast(100.0f), 1.0f);
  EXPECT_EQ(cpu::tiled::tanh_fast(-100.0f), -1.0f);
}

TEST(TiledMath, F16ConversionIsBitExactForEveryValue) {
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    const float want = core::f16_to_float(std::uint16_t(h));
    const float got = cpu::tiled::f16_bits_to_float(std::uint16_t(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << "bits " << h;
    } else {
      ASSERT_EQ(core::float_bits(got), core::float_bits(want)) << "bits " << h;
    }
  }
}

// --- block classification -------------------------------------------------------------------

struct BlockCount {
  int skip = 0, full = 0, cut = 0;
};

// Classifies every block of `block` keys against every query tile and checks it by brute force
// over each (valid row, key) pair with core::key_visible: skip must mean no key visible, full
// every key visible to every row, and cut must mean neither (otherwise work is wasted).
BlockCount check_blocks(const core::MaskRule& rule, std::int64_t len_q, std::int64_t len_k,
                        std::int64_t group, std::int64_t rows, std::int64_t block) {
  core::ProblemDims dims;
  dims.seqlen_q = len_q;
  dims.batch = 1;
  dims.heads_q = group;
  dims.heads_kv = 1;
  dims.head_dim = dims.head_dim_v = 64;
  dims.mask = rule;
  const cpu::tiled::TileShape shape = cpu::tiled::tile_shape(dims, rows);
  const core::SeqSpan span{0, len_q, 0, len_k};
  const std::int64_t shift = core::diagonal_shift(rule, len_q, len_k);
  cpu::tiled::TileMask m;
  BlockCount count;
  for (std::int64_t t = 0; t * shape.tokens < len_q; ++t) {
    const auto tile = cpu::tiled::query_tile(span, 0, 0, t, shape);
    cpu::tiled::build_tile_mask(m, dims, Tensor{}, tile, shape);
    for (std::int64_t j0 = 0; j0 < len_k; j0 += block) {
      const std::int64_t j1 = std::min(j0 + block, len_k);
      bool any = false, all = true;
      for (std::int64_t i = tile.t0; i < tile.t0 + tile.ntok; ++i) {
        for (std::int64_t j = j0; j < j1; ++j) {
          const bool visible = core::key_visible(rule, i + shift, j, len_k);
          any = any || visible;
          all = all && visible;
        }
      }
      const auto kind = cpu::tiled::classify_block(rule, m, j0, j1);
      using cpu::tiled::BlockKind;
      const BlockKind want = !any ? BlockKind::skip : (all ? BlockKind::full : BlockKind::cut);
      EXPECT_EQ(int(kind), int(want)) << "tile " << t << " keys [" << j0 << ", " << j1 << ")";
      count.skip += kind == BlockKind::skip;
      count.full += kind == BlockKind::full;
      count.cut += kind == BlockKind::cut;
    }
  }
  return count;
}

TEST(TiledBlocks, ClassificationMatchesBruteForce) {
  std::vector<core::MaskRule> rules(7);
  rules[1].causal = true;
  rules[1].bottom_right = false;
  rules[2].causal = true;
  rules[3].window_left = 37;
  rules[3].window_right = 9;
  rules[4].causal = true;
  rules[4].window_left = 20;
  rules[5] = rules[1];
  rules[5].prefix_len = 29;
  rules[6].window_left = 5;
  rules[6].window_right = 0;
  rules[6].prefix_len = 40;
  BlockCount total;
  for (const auto& rule : rules) {
    for (auto lens :
         {std::pair<std::int64_t, std::int64_t>{67, 150}, {150, 67}, {200, 200}, {1, 300}}) {
      for (std::int64_t group : {1, 8}) {
        for (std::int64_t rows : {32, 128}) {
          for (std::int64_t block : {16, 128}) {
            SCOPED_TRACE("rule " + std::to_string(&rule - rules.data()) + " q " +
                         std::to_string(lens.first) + " k " + std::to_string(lens.second) +
                         " group " + std::to_string(group) + " rows " + std::to_string(rows) +
                         " block " + std::to_string(block));
            const BlockCount c = check_blocks(rule, lens.first, lens.second, group, rows, block);
            total.skip += c.skip;
            total.full += c.full;
            total.cut += c.cut;
          }
        }
      }
    }
  }
  EXPECT_GT(total.skip, 100);  // the check saw every kind often
  EXPECT_GT(total.full, 100);
  EXPECT_GT(total.cut, 100);
}

// --- forward --------------------------------------------------------------------------------

// atol of the tolerance rule. fp32: the kernel sums in another order than the oracle and uses a
// polynomial exp2; the largest error seen over these tests is 6e-7 on outputs of size ~0.1..1,
// against plain errors of ~1e-7. 16-bit: the rule's 2x plain error alone holds, 1e-5 is a margin.
double atol_for(DType dtype) {
  return dtype == DType::f32 ? 2e-6 : 1e-5;
}
constexpr double kLseTol = 1e-5;  // fp32 lse, |lse| < ~20 here; observed max error 4e-6

struct Outputs {
  HostTensor out, lse;
};

Outputs run_tiled(const CaseData& c, DType out_dtype) {
  Outputs o{HostTensor(out_dtype, c.out_shape()), HostTensor(DType::f32, c.lse_shape())};
  o.out.poison();
  o.lse.poison();
  attention_forward(c.forward_args(o.out, o.lse, Algo::fa2));
  return o;
}

void expect_matches_oracle(const CaseData& c, const Outputs& got) {
  const ForwardResult oracle = oracle_forward(c);
  const ForwardResult plain = plain_forward(c);
  EXPECT_EQ("",
            check_close("out", got.out.values(), oracle.out, plain.out, atol_for(c.spec.dtype)));
  EXPECT_EQ("", check_lse(got.lse.values(), oracle.lse, kLseTol));
}

void expect_forward_matches(const CaseSpec& spec) {
  SCOPED_TRACE(spec.name());
  const CaseData c = make_case(spec);
  expect_matches_oracle(c, run_tiled(c, spec.dtype));
}

// Packed batch with a zero-length and a length-1 sequence, seqlen_q != seqlen_k, a KV length
// over one 128-key tile, and keys with no queries / queries with no keys.
CaseSpec varlen_spec(DType dtype, std::int64_t d, std::int64_t heads_q, std::int64_t heads_kv) {
  CaseSpec s;
  s.dtype = dtype;
  s.head_dim = d;
  s.heads_q = heads_q;
  s.heads_kv = heads_kv;
  s.varlen = true;
  s.seqlens_q = {67, 0, 1, 23, 9};
  s.seqlens_k = {150, 11, 1, 0, 9};
  return s;
}

struct GridParam {
  DType dtype;
  std::int64_t d;
  MaskKind mask;
  std::int64_t group;
};

class TiledForwardGrid : public ::testing::TestWithParam<GridParam> {};

TEST_P(TiledForwardGrid, MatchesOracle) {
  const GridParam p = GetParam();
  const std::int64_t heads_kv = p.group == 8 ? 1 : 2;
  CaseSpec s = varlen_spec(p.dtype, p.d, heads_kv * p.group, heads_kv);
  apply_mask(s, p.mask);
  s.seed = std::uint32_t(p.d * 7 + p.group);
  expect_forward_matches(s);
}

std::vector<GridParam> forward_grid() {
  std::vector<GridParam> grid;
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    for (std::int64_t d : {32, 64, 80, 128, 256}) {
      for (MaskKind m : kAllMasks) {
        for (std::int64_t g : {1, 2, 8}) grid.push_back({dt, d, m, g});
      }
    }
  }
  return grid;
}

std::string grid_name(const ::testing::TestParamInfo<GridParam>& info) {
  const GridParam& p = info.param;
  return std::string(dtype_name(p.dtype)) + "_d" + std::to_string(p.d) + "_" + mask_name(p.mask) +
         "_g" + std::to_string(p.group);
}

INSTANTIATE_TEST_SUITE_P(Varlen, TiledForwardGrid, ::testing::ValuesIn(forward_grid()), grid_name);

// Batched (not packed) layout, both seqlen_q < seqlen_k and seqlen_q > seqlen_k (bottom-right
// causal then hides every key from the first queries).
TEST(TiledForward, BatchedLayoutEveryMask) {
  for (MaskKind m : kAllMasks) {
    for (auto lens : {std::pair<std::int64_t, std::int64_t>{70, 157}, {157, 70}}) {
      CaseSpec s;
      s.seqlens_q = {lens.first, lens.first};
      s.seqlens_k = {lens.second, lens.second};
      s.heads_q = 4;
      s.heads_kv = 2;
      apply_mask(s, m);
      expect_forward_matches(s);
    }
  }
}

// Every mask moved by Mask::diagonal_offset (ring attention's chunk pairs): past every key, before
// the first, and off every block edge.
TEST(TiledForward, DiagonalOffsetsMoveEveryMask) {
  for (MaskKind m : kAllMasks) {
    for (std::int64_t offset : {-90, 53, 300}) {
      CaseSpec s;
      s.seqlens_q = {70, 70};
      s.seqlens_k = {157, 157};
      s.heads_q = 4;
      s.heads_kv = 2;
      apply_mask(s, m);
      s.diagonal_offset = offset;
      expect_forward_matches(s);
    }
  }
}

TEST(TiledForward, HeadDimEdges) {
  for (auto dims :
       {std::pair<std::int64_t, std::int64_t>{1, 1}, {512, 512}, {64, 96}, {128, 40}, {3, 200}}) {
    for (DType dt : {DType::f32, DType::bf16}) {
      CaseSpec s = varlen_spec(dt, dims.first, 2, 1);
      s.head_dim_v = dims.second;
      s.causal = true;
      expect_forward_matches(s);
    }
  }
}

// A poisoned view of `shape` inside a larger allocation: every dim but the last gets a
// non-packed stride.
HostTensor strided(DType dtype, const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> alloc;
  for (std::size_t i = 0; i < shape.size(); ++i) alloc.push_back(shape[i] + (i == 0 ? 1 : 3));
  HostTensor t(dtype, shape, alloc);
  t.poison();
  return t;
}

HostTensor strided_copy(const HostTensor& t) {
  std::vector<std::int64_t> shape;
  for (int i = 0; i < t.view().rank(); ++i) shape.push_back(t.view().size(i));
  HostTensor s = strided(t.dtype(), shape);
  s.set_values(t.values());
  return s;
}

TEST(TiledForward, StridedInputsAndOutputs) {
  for (bool varlen : {false, true}) {
    CaseSpec s = varlen_spec(DType::f16, 80, 4, 2);
    if (!varlen) {
      s.varlen = false;
      s.seqlens_q = {70, 70};
      s.seqlens_k = {150, 150};
    }
    s.causal = true;
    SCOPED_TRACE(s.name());
    const CaseData c = make_case(s);
    const HostTensor q = strided_copy(c.q), k = strided_copy(c.k), v = strided_copy(c.v);
    Outputs o{strided(s.dtype, c.out_shape()), HostTensor(DType::f32, c.lse_shape())};
    o.lse.poison();
    AttentionArgs a = c.forward_args(o.out, o.lse, Algo::fa2);
    a.q = q;
    a.k = k;
    a.v = v;
    attention_forward(a);
    expect_matches_oracle(c, o);
  }
}

TEST(TiledForward, OutputDtypeMayDifferFromInputs) {
  for (auto types : {std::pair<DType, DType>{DType::f16, DType::f32},
                     {DType::bf16, DType::f32},
                     {DType::f32, DType::f64},
                     {DType::f32, DType::bf16}}) {
    CaseSpec s = varlen_spec(types.first, 64, 4, 2);
    s.causal = true;
    SCOPED_TRACE(s.name() + " out " + dtype_name(types.second));
    const CaseData c = make_case(s);
    const Outputs o = run_tiled(c, types.second);
    const ForwardResult oracle = oracle_forward(c);
    // Rounding to a narrower output adds its half-ulp to the input dtype's rule.
    const double rounding = types.second == DType::bf16 ? 4e-3 : 0.0;
    EXPECT_EQ("", check_close("out", o.out.values(), oracle.out, plain_forward(c).out,
                              atol_for(s.dtype) + rounding));
    EXPECT_EQ("", check_lse(o.lse.values(), oracle.lse, kLseTol));
  }
}

// Slopes per (batch, head): the oracle reads them too, the plain reference does not, so the
// bound is absolute (fp32 inputs: a few ulps of outputs below 1).
TEST(TiledForward, AlibiSlopesPerBatchAndHead) {
  CaseSpec s;
  s.seqlens_q = {90, 90};
  s.seqlens_k = {140, 140};
  s.heads_q = 4;
  s.heads_kv = 2;
  s.causal = true;
  const CaseData c = make_case(s);
  HostTensor slopes(DType::f32, {2, 4});
  slopes.set_values({0.5, 0.25, 0.125, 0.0625, 0.02, 0.9, 0.3, 0.0});
  auto run = [&](Algo algo, DType out_dtype) {
    Outputs o{HostTensor(out_dtype, c.out_shape()), HostTensor(DType::f32, c.lse_shape())};
    o.out.poison();
    o.lse.poison();
    AttentionArgs a = c.forward_args(o.out, o.lse, algo);
    a.mask.alibi_slopes = slopes;
    attention_forward(a);
    return o;
  };
  const Outputs got = run(Algo::fa2, DType::f32), oracle = run(Algo::reference, DType::f64);
  const auto g = got.out.values(), want = oracle.out.values();
  double worst = 0;
  for (std::size_t i = 0; i < g.size(); ++i) worst = std::max(worst, std::fabs(g[i] - want[i]));
  EXPECT_LT(worst, 2e-6);
  EXPECT_EQ("", check_lse(got.lse.values(), oracle.lse.values(), kLseTol));
}

// Queries that see no key: output exactly 0 and lse exactly -inf, never NaN.
TEST(TiledForward, QueriesThatSeeNoKeyGiveZeroAndMinusInfinity) {
  CaseSpec s;
  s.seqlens_q = {150};
  s.seqlens_k = {60};
  s.causal = true;  // bottom-right: queries 0..89 have diag < 0
  s.window_left = 5;
  const CaseData c = make_case(s);
  const Outputs o = run_tiled(c, s.dtype);
  const auto out = o.out.values(), lse = o.lse.values();
  const std::int64_t dv = s.dim_v(), hq = s.heads_q;
  for (std::int64_t h = 0; h < hq; ++h) {
    for (std::int64_t i = 0; i < 150; ++i) {
      const bool empty = i < 90;
      const double l = lse[std::size_t(h * 150 + i)];
      EXPECT_EQ(empty, l == kNegInf) << "h " << h << " i " << i << " lse " << l;
      for (std::int64_t e = 0; empty && e < dv; ++e) {
        ASSERT_EQ(out[std::size_t((i * hq + h) * dv + e)], 0.0) << "h " << h << " i " << i;
      }
    }
  }
  expect_matches_oracle(c, o);
}

TEST(TiledForward, RepeatedRunsAreBitIdentical) {
  CaseSpec s = varlen_spec(DType::bf16, 128, 8, 1);
  s.causal = true;
  const CaseData c = make_case(s);
  EXPECT_EQ(run_tiled(c, DType::f32).out.values(), run_tiled(c, DType::f32).out.values());
}

}  // namespace
}  // namespace flashkit::testing
