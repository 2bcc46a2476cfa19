// The fp32-input forward on CUDA (fwd_fp32.cu: Algo::automatic and fa2 with f32 q, k, v) against
// the fp64 oracle under the f32 rule: every mask over a packed varlen batch with an empty query
// sequence, an empty key sequence and lengths that cross its 64-row tiles and 32-key blocks,
// GQA 3, each compiled head-dim bucket (d_v != d in one); the same with keys long enough that
// the few CTAs split them (1030 keys for 36 CTAs: 8 splits on a 132-SM H200, most of them empty
// under a window or top-left causal mask) and merge; a long causal case over many blocks with a
// bf16 output; and what FA1's loop serves instead: head dims above 256, and d = 256 when
// the CTA's shared memory is below the kernel's 145 KB.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "attention_case.hpp"
#include "gpu_forward.hpp"
#include "offset_cases.hpp"
#include "smem_limit_env.hpp"

namespace flashkit::testing {
namespace {

CaseSpec varlen_f32(int head_dim, int head_dim_v, MaskKind mask, bool long_keys = false) {
  CaseSpec s;
  s.dtype = DType::f32;
  s.varlen = true;
  s.seqlens_q = {0, 65, 130, 7};
  s.seqlens_k = {17, 0, 161, 40};
  if (long_keys) {
    s.seqlens_q = {1, 70, 0};
    s.seqlens_k = {700, 1030, 300};
  }
  s.heads_q = 6;
  s.heads_kv = 2;
  s.head_dim = head_dim;
  s.head_dim_v = head_dim_v;
  apply_mask(s, mask);
  return s;
}

using Fp32Param = std::tuple<int, MaskKind>;  // head dim (d_v 24 at d 40), mask
class Fp32Forward : public ::testing::TestWithParam<Fp32Param> {};

TEST_P(Fp32Forward, MatchesOracle) {
  const auto [d, mask] = GetParam();
  const CaseSpec s = varlen_f32(d, d == 40 ? 24 : d, mask);
  expect_gpu_forward_matches(s, Algo::automatic);
  expect_gpu_forward_matches(s, Algo::fa2);
}

TEST_P(Fp32Forward, SplitKeysMatchOracle) {
  const auto [d, mask] = GetParam();
  expect_gpu_forward_matches(varlen_f32(d, d == 40 ? 24 : d, mask, true), Algo::automatic);
}

std::string fp32_name(const ::testing::TestParamInfo<Fp32Param>& info) {
  const auto [d, mask] = info.param;
  return "d" + std::to_string(d) + "_" + mask_name(mask);
}

INSTANTIATE_TEST_SUITE_P(All, Fp32Forward,
                         ::testing::Combine(::testing::Values(40, 64, 128, 256),
                                            ::testing::ValuesIn(kAllMasks)),
                         fp32_name);

TEST(Fp32Forward, DiagonalOffsetsMoveEveryMask) {
  for (const CaseSpec& s : diagonal_offset_cases(DType::f32, 64)) {
    SCOPED_TRACE(s.name());
    expect_gpu_forward_matches(s, Algo::automatic);
  }
}

TEST(Fp32Forward, LongCausalOverManyBlocksWithBf16Output) {
  CaseSpec s;
  s.dtype = DType::f32;
  s.seqlens_q = {300, 257};
  s.seqlens_k = {1000, 1000};
  s.heads_q = 4;
  s.heads_kv = 4;
  s.head_dim = 128;
  s.causal = true;
  expect_gpu_forward_matches(s, Algo::automatic);
  expect_gpu_forward_matches(s, Algo::automatic, DType::bf16);
}

TEST(Fp32Forward, HeadDimsAboveItsTilesAndASmallSharedMemoryLimitStillMatch) {
  expect_gpu_forward_matches(varlen_f32(320, 320, MaskKind::causal_br), Algo::automatic);
  ScopedSmemLimit limit("100");  // below the d = 256 kernel's 145 KB, above d = 128's 73 KB
  expect_gpu_forward_matches(varlen_f32(256, 256, MaskKind::window), Algo::automatic);
  expect_gpu_forward_matches(varlen_f32(128, 128, MaskKind::window), Algo::automatic);
}

}  // namespace
}  // namespace flashkit::testing
