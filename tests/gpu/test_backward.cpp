// The CUDA backward against the fp64 oracle under DESIGN.md's tolerance rule, with out and lse
// from the CUDA forward (as a training step has them): dtypes x head dims x masks on a packed
// varlen batch with an empty query and an empty key sequence and GQA; d != d_v; f32 gradients
// from 16-bit inputs; bit-identical repeats; the algos it refuses.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "attention_case.hpp"
#include "device_tensor.hpp"
#include "flashkit/error.hpp"
#include "gpu_forward.hpp"

namespace flashkit::testing {
namespace {

struct GpuGrads {
  HostTensor dq, dk, dv;
};

// Forward then backward on the device; the gradients copied back.
GpuGrads run_backward(const CaseData& c, DType grad_dtype, Algo algo = Algo::automatic) {
  const DeviceCase dev(c);
  HostTensor out(c.spec.dtype, c.out_shape()), lse(DType::f32, c.lse_shape());
  DeviceTensor d_out(out), d_lse(lse), d_dout(c.dout);
  // The forward only provides out and lse; fa2 needs d_v = d, fa1 takes any.
  const bool same_dims = c.spec.dim_v() == c.spec.head_dim;
  attention_forward(
      dev.forward_args(c, d_out.view(), d_lse.view(), same_dims ? Algo::automatic : Algo::fa1));
  GpuGrads g{HostTensor(grad_dtype, c.q.shape()), HostTensor(grad_dtype, c.k.shape()),
             HostTensor(grad_dtype, c.v.shape())};
  DeviceTensor dq(g.dq), dk(g.dk), dv(g.dv);
  dq.poison();
  dk.poison();
  dv.poison();
  attention_backward(dev.backward_args(c, d_out.view(), d_lse.view(), d_dout.view(), dq.view(),
                                       dk.view(), dv.view(), algo));
  expect_device_ok();
  dq.copy_to(g.dq);
  dk.copy_to(g.dk);
  dv.copy_to(g.dv);
  return g;
}

// 1e-5 on top of twice the plain reference's error, as the CPU backward's tests: the fp32 sums
// run in another order than the oracle's and P is recomputed from an fp32 lse.
void expect_grads_match(const CaseData& c, const GpuGrads& g) {
  const BackwardResult oracle = oracle_backward(c), plain = plain_backward(c);
  constexpr double kAtol = 1e-5;
  EXPECT_EQ("", check_close("dq", g.dq.values(), oracle.dq, plain.dq, kAtol));
  EXPECT_EQ("", check_close("dk", g.dk.values(), oracle.dk, plain.dk, kAtol));
  EXPECT_EQ("", check_close("dv", g.dv.values(), oracle.dv, plain.dv, kAtol));
}

CaseSpec varlen_spec(DType dtype, std::int64_t d) {
  CaseSpec s;
  s.dtype = dtype;
  s.varlen = true;
  s.seqlens_q = {40, 0, 75, 17};
  s.seqlens_k = {60, 33, 0, 50};
  s.heads_q = 4;
  s.heads_kv = 2;
  s.head_dim = d;
  s.seed = unsigned(d) + 3;
  return s;
}

using BwdParam = std::tuple<DType, int, MaskKind>;
class CudaBackward : public ::testing::TestWithParam<BwdParam> {};

TEST_P(CudaBackward, MatchesOracle) {
  const auto [dtype, d, mask] = GetParam();
  CaseSpec s = varlen_spec(dtype, d);
  apply_mask(s, mask);
  SCOPED_TRACE(s.name());
  const CaseData c = make_case(s);
  expect_grads_match(c, run_backward(c, dtype));
}

std::string bwd_name(const ::testing::TestParamInfo<BwdParam>& info) {
  const auto [dtype, d, mask] = info.param;
  return std::string(dtype_name(dtype)) + "_d" + std::to_string(d) + "_" + mask_name(mask);
}

INSTANTIATE_TEST_SUITE_P(All, CudaBackward,
                         ::testing::Combine(::testing::Values(DType::f32, DType::f16, DType::bf16),
                                            ::testing::Values(32, 64, 128, 256),
                                            ::testing::ValuesIn(kAllMasks)),
                         bwd_name);

TEST(CudaBackwardEdges, BatchedGqaDifferentValueDimAndF32Gradients) {
  CaseSpec s;
  s.dtype = DType::bf16;
  s.seqlens_q = {70, 70};
  s.seqlens_k = {90, 90};
  s.heads_q = 8;
  s.heads_kv = 2;
  s.head_dim = 64;
  s.head_dim_v = 40;
  s.causal = true;
  SCOPED_TRACE(s.name());
  const CaseData c = make_case(s);
  expect_grads_match(c, run_backward(c, DType::f32));
}

TEST(CudaBackwardEdges, RepeatsAreBitIdentical) {
  CaseSpec s = varlen_spec(DType::f16, 64);
  s.causal = true;
  const CaseData c = make_case(s);
  const GpuGrads a = run_backward(c, DType::f32), b = run_backward(c, DType::f32);
  EXPECT_EQ(a.dq.values(), b.dq.values());
  EXPECT_EQ(a.dk.values(), b.dk.values());
  EXPECT_EQ(a.dv.values(), b.dv.values());
}

TEST(CudaBackwardEdges, LineageAlgosAreRejected) {
  const CaseData c = make_case(varlen_spec(DType::bf16, 64));
  for (Algo algo : {Algo::naive, Algo::fa1, Algo::fa3}) {
    try {
      run_backward(c, DType::bf16, algo);
      ADD_FAILURE() << "no error for " << algo_name(algo);
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), "algo") << e.what();
    }
  }
}

}  // namespace
}  // namespace flashkit::testing
