// The lineage kernels on the GPU (Algo::naive: three kernels with S and P in memory; Algo::fa1:
// FA1 loop order, also the fp32-input path above the CUDA-core FA2 kernel's head dims) against
// the fp64 oracle: every mask over a packed varlen batch with empty sequences, GQA, head dims
// that are no multiple of anything (d 40, d_v 24), f32/f16/bf16 inputs.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "attention_case.hpp"
#include "gpu_forward.hpp"

namespace flashkit::testing {
namespace {

using LineageParam = std::tuple<Algo, DType, MaskKind>;
class LineageForward : public ::testing::TestWithParam<LineageParam> {};

TEST_P(LineageForward, MatchesOracle) {
  const auto [algo, dtype, mask] = GetParam();
  CaseSpec s;
  s.dtype = dtype;
  s.varlen = true;
  s.seqlens_q = {0, 33, 70, 18};
  s.seqlens_k = {17, 0, 90, 41};
  s.heads_q = 6;
  s.heads_kv = 2;
  s.head_dim = 40;
  s.head_dim_v = 24;
  apply_mask(s, mask);
  expect_gpu_forward_matches(s, algo);
}

std::string lineage_name(const ::testing::TestParamInfo<LineageParam>& info) {
  const auto [algo, dtype, mask] = info.param;
  return std::string(algo_name(algo)) + "_" + dtype_name(dtype) + "_" + mask_name(mask);
}

INSTANTIATE_TEST_SUITE_P(All, LineageForward,
                         ::testing::Combine(::testing::Values(Algo::naive, Algo::fa1),
                                            ::testing::Values(DType::f32, DType::f16, DType::bf16),
                                            ::testing::ValuesIn(kAllMasks)),
                         lineage_name);

TEST(LineageForward, BatchedLayoutAndLargeHeadDim) {
  for (Algo algo : {Algo::naive, Algo::fa1}) {
    CaseSpec s;
    s.dtype = DType::bf16;
    s.seqlens_q = {65, 65};
    s.seqlens_k = {130, 130};
    s.head_dim = 256;
    s.causal = true;
    expect_gpu_forward_matches(s, algo, DType::f32);
  }
}

// f32 inputs under automatic and fa2 run in fp32 (fwd_fp32.cu): held to the f32 rule.
TEST(LineageForward, F32InputsTakeTheFp32Path) {
  for (Algo algo : {Algo::automatic, Algo::fa2}) {
    CaseSpec s;
    s.dtype = DType::f32;
    s.seqlens_q = {90};
    s.seqlens_k = {120};
    s.head_dim = 64;
    s.causal = true;
    s.softcap = 3.0f;
    expect_gpu_forward_matches(s, algo);
  }
}

}  // namespace
}  // namespace flashkit::testing
