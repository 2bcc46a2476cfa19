// The sm80 FA2-class forward on the GPU against the fp64 oracle: dtypes x head dims x masks x
// GQA ratios, packed varlen batches with empty sequences and lengths off the tile sizes,
// seqlen_q != seqlen_k both ways, f32 output, strided inputs, and a long causal case that runs
// many KV blocks per tile.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "attention_case.hpp"
#include "flashkit/error.hpp"
#include "forward_cases.hpp"
#include "gpu_forward.hpp"
#include "offset_cases.hpp"
#include "smem_limit_env.hpp"

namespace flashkit::testing {
namespace {

constexpr int kHeadDims[] = {32, 64, 96, 128, 192, 256};

class Fa2Grid : public ::testing::TestWithParam<GridParam> {};

TEST_P(Fa2Grid, MatchesOracle) {
  expect_gpu_forward_matches(grid_case(GetParam()), Algo::fa2);
}

INSTANTIATE_TEST_SUITE_P(All, Fa2Grid,
                         ::testing::Combine(::testing::Values(DType::f16, DType::bf16),
                                            ::testing::ValuesIn(kHeadDims),
                                            ::testing::ValuesIn(kAllMasks),
                                            ::testing::Values(1, 4, 8)),
                         grid_name);

class Fa2Varlen : public ::testing::TestWithParam<VarlenParam> {};

TEST_P(Fa2Varlen, MatchesOracle) {
  expect_gpu_forward_matches(varlen_case(GetParam()), Algo::fa2);
}

INSTANTIATE_TEST_SUITE_P(All, Fa2Varlen,
                         ::testing::Combine(::testing::Values(DType::f16, DType::bf16),
                                            ::testing::ValuesIn(kHeadDims),
                                            ::testing::ValuesIn(kAllMasks)),
                         varlen_name);

TEST(Fa2Forward, MoreQueriesThanKeysBothAlignments) {
  for (CausalAlign align : {CausalAlign::top_left, CausalAlign::bottom_right}) {
    expect_gpu_forward_matches(more_queries_than_keys_case(align, 64), Algo::fa2);
  }
}

TEST(Fa2Forward, DiagonalOffsetsMoveEveryMask) {
  for (int d : {64, 128, 256}) {
    for (const CaseSpec& s : diagonal_offset_cases(d == 128 ? DType::f16 : DType::bf16, d)) {
      SCOPED_TRACE(s.name());
      expect_gpu_forward_matches(s, Algo::fa2);
    }
  }
}

TEST(Fa2Forward, F32OutputFromF16AndBf16) {
  for (DType dtype : {DType::f16, DType::bf16}) {
    expect_gpu_forward_matches(square_case(dtype, 190, 128, true), Algo::fa2, DType::f32);
  }
}

TEST(Fa2Forward, AutomaticPicksFa2ForHalfInputs) {
  CaseSpec s;
  s.dtype = DType::bf16;
  s.seqlens_q = {100};
  s.seqlens_k = {100};
  s.head_dim = 96;
  s.window_left = 20;
  s.window_right = 0;
  expect_gpu_forward_matches(s, Algo::automatic);
}

TEST(Fa2Forward, PaddedRowStrides) {
  for (bool varlen : {false, true}) {
    expect_gpu_forward_matches(padded_rows_case(varlen, 64), Algo::fa2, DType::f16);
  }
}

TEST(Fa2Forward, LongCausalRunsManyBlocksPerTile) {
  CaseSpec s;
  s.dtype = DType::bf16;
  s.seqlens_q = {1024};
  s.seqlens_k = {1024};
  s.heads_q = 2;
  s.heads_kv = 1;
  s.head_dim = 128;
  s.causal = true;
  expect_gpu_forward_matches(s, Algo::fa2);
  s.causal = false;
  s.window_left = 300;
  s.window_right = 200;
  s.prefix_len = 100;
  expect_gpu_forward_matches(s, Algo::fa2);
}

// d = 192 and 256 have two tile shapes (fwd_tile_shape.hpp): the H200 runs 64 x 64 by default
// and, with FLASHKIT_SMEM_LIMIT_KB=163, the 128 x 64 shape of a 163 KB A100; both meet the oracle
// under every mask, and a bad value is refused by name before any launch.
TEST(Fa2Forward, HeadDims192And256InBothSharedMemoryShapesAndBadLimitsAreRefused) {
  ScopedSmemLimit limit("163");
  for (int d : {192, 256}) {
    for (DType dtype : {DType::f16, DType::bf16}) {
      for (MaskKind mask : kAllMasks) {
        expect_gpu_forward_matches(varlen_case({dtype, d, mask}), Algo::fa2);
        expect_gpu_forward_matches(grid_case({dtype, d, mask, 4}), Algo::fa2);
      }
    }
  }
  const CaseData c = make_case(varlen_case({DType::bf16, 256, MaskKind::causal_br}));
  for (const char* bad : {"0", "-4", "16x", ""}) {
    limit.set(bad);
    try {
      expect_gpu_forward_matches(c, Algo::fa2, DType::bf16);
      ADD_FAILURE() << "no error for '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), ScopedSmemLimit::kVariable) << e.what();
    }
  }
}

}  // namespace
}  // namespace flashkit::testing
