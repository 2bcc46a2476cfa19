// The CUDA backward against the fp64 oracle under DESIGN.md's tolerance rule, with out and lse
// from the CUDA forward (as a training step has them). The tensor-core path (f16/bf16): head dims
// x masks x GQA {1, 4, 8} on packed varlen batches with empty query and key sequences and lengths
// off every tile size, with dQ through atomics and through the deterministic dQ kernel;
// seqlen_q != seqlen_k under both causal alignments; long sequences (many query and key blocks);
// strided rows; f32 gradients; bit-identical repeats. The CUDA-core path (f32 inputs, d != d_v):
// head dims x masks. And the algos it refuses.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "attention_case.hpp"
#include "device_tensor.hpp"
#include "flashkit/error.hpp"
#include "gpu_forward.hpp"
#include "mask_kinds.hpp"
#include "offset_cases.hpp"
#include "smem_limit_env.hpp"

namespace flashkit::testing {
namespace {

struct GpuGrads {
  HostTensor dq, dk, dv;
};

// Forward then backward on the device; the gradients copied back.
struct RunOptions {
  Algo algo = Algo::automatic;
  bool deterministic = false;
  // Each gradient's own dtype (grad_dtype where unset) and rows 8 elements longer than d.
  std::optional<DType> dk_dtype, dv_dtype;
  bool padded_grads = false;
};

GpuGrads run_backward(const CaseData& c, DType grad_dtype, RunOptions opt = {}) {
  const DeviceCase dev(c);
  HostTensor out(c.spec.dtype, c.out_shape()), lse(DType::f32, c.lse_shape());
  DeviceTensor d_out(out), d_lse(lse), d_dout(c.dout);
  // The forward only provides out and lse; fa2 needs d_v = d, fa1 takes any.
  const bool same_dims = c.spec.dim_v() == c.spec.head_dim;
  attention_forward(
      dev.forward_args(c, d_out.view(), d_lse.view(), same_dims ? Algo::automatic : Algo::fa1));
  GpuGrads g{HostTensor(grad_dtype, c.q.shape()),
             HostTensor(opt.dk_dtype.value_or(grad_dtype), c.k.shape()),
             HostTensor(opt.dv_dtype.value_or(grad_dtype), c.v.shape())};
  if (opt.padded_grads) {
    g.dq = padded_copy(g.dq);
    g.dk = padded_copy(g.dk);
    g.dv = padded_copy(g.dv);
  }
  DeviceTensor dq(g.dq), dk(g.dk), dv(g.dv);
  dq.poison();
  dk.poison();
  dv.poison();
  BackwardArgs args = dev.backward_args(c, d_out.view(), d_lse.view(), d_dout.view(), dq.view(),
                                        dk.view(), dv.view(), opt.algo);
  args.deterministic = opt.deterministic;
  attention_backward(args);
  expect_device_ok();
  dq.copy_to(g.dq);
  dk.copy_to(g.dk);
  dv.copy_to(g.dv);
  return g;
}

// 1e-5 on top of twice the plain reference's error, as the CPU backward's tests: the fp32 sums
// run in another order than the oracle's and P is recomputed from an fp32 lse.
void expect_grads_match(const BackwardResult& oracle, const BackwardResult& plain,
                        const GpuGrads& g) {
  constexpr double kAtol = 1e-5;
  EXPECT_EQ("", check_close("dq", g.dq.values(), oracle.dq, plain.dq, kAtol));
  EXPECT_EQ("", check_close("dk", g.dk.values(), oracle.dk, plain.dk, kAtol));
  EXPECT_EQ("", check_close("dv", g.dv.values(), oracle.dv, plain.dv, kAtol));
}
void expect_grads_match(const CaseData& c, const GpuGrads& g) {
  expect_grads_match(oracle_backward(c), plain_backward(c), g);
}

constexpr int kHeadDims[] = {32, 64, 96, 128, 192, 256};

// A packed batch: an empty query sequence, an empty key sequence, a single query, and lengths
// past one tile of every head dim's shape (64 queries, 64 or 128 keys) but off its multiples;
// 150 queries against 197 keys shift a bottom-right diagonal by 47.
CaseSpec varlen_spec(DType dtype, int d, int group) {
  CaseSpec s;
  s.dtype = dtype;
  s.varlen = true;
  s.seqlens_q = {0, 70, 150, 1};
  s.seqlens_k = {9, 0, 197, 130};
  s.heads_q = 8;
  s.heads_kv = 8 / group;
  s.head_dim = d;
  s.seed = unsigned(d * 13 + group);
  return s;
}

using GridParam = std::tuple<DType, int, MaskKind, int>;  // dtype, head dim, mask, q per kv head
class TensorCoreBackward : public ::testing::TestWithParam<GridParam> {};

TEST_P(TensorCoreBackward, MatchesOracle) {
  const auto [dtype, d, mask, group] = GetParam();
  CaseSpec s = varlen_spec(dtype, d, group);
  apply_mask(s, mask);
  SCOPED_TRACE(s.name());
  const CaseData c = make_case(s);
  expect_grads_match(c, run_backward(c, dtype));
}

std::string grid_name(const ::testing::TestParamInfo<GridParam>& info) {
  const auto [dtype, d, mask, group] = info.param;
  return std::string(dtype_name(dtype)) + "_d" + std::to_string(d) + "_" + mask_name(mask) + "_g" +
         std::to_string(group);
}

INSTANTIATE_TEST_SUITE_P(All, TensorCoreBackward,
                         ::testing::Combine(::testing::Values(DType::f16, DType::bf16),
                                            ::testing::ValuesIn(kHeadDims),
                                            ::testing::ValuesIn(kAllMasks),
                                            ::testing::Values(1, 4, 8)),
                         grid_name);

// deterministic = true: dQ from the dQ kernel instead of atomics; same inputs, same rule.
using DetParam = std::tuple<int, MaskKind>;
class DeterministicBackward : public ::testing::TestWithParam<DetParam> {};

TEST_P(DeterministicBackward, MatchesOracle) {
  const auto [d, mask] = GetParam();
  CaseSpec s = varlen_spec(DType::bf16, d, 4);
  apply_mask(s, mask);
  SCOPED_TRACE(s.name());
  const CaseData c = make_case(s);
  RunOptions opt;
  opt.deterministic = true;
  expect_grads_match(c, run_backward(c, DType::bf16, opt));
}

std::string det_name(const ::testing::TestParamInfo<DetParam>& info) {
  const auto [d, mask] = info.param;
  return "d" + std::to_string(d) + "_" + mask_name(mask);
}

INSTANTIATE_TEST_SUITE_P(All, DeterministicBackward,
                         ::testing::Combine(::testing::ValuesIn(kHeadDims),
                                            ::testing::ValuesIn(kAllMasks)),
                         det_name);

// f32 inputs keep the CUDA-core backward.
using SimtParam = std::tuple<int, MaskKind>;
class CudaCoreBackward : public ::testing::TestWithParam<SimtParam> {};

TEST_P(CudaCoreBackward, MatchesOracle) {
  const auto [d, mask] = GetParam();
  CaseSpec s = varlen_spec(DType::f32, d, 2);
  apply_mask(s, mask);
  SCOPED_TRACE(s.name());
  const CaseData c = make_case(s);
  expect_grads_match(c, run_backward(c, DType::f32));
}

INSTANTIATE_TEST_SUITE_P(F32, CudaCoreBackward,
                         ::testing::Combine(::testing::Values(32, 64, 128, 256),
                                            ::testing::ValuesIn(kAllMasks)),
                         det_name);

// seqlen_q != seqlen_k both ways under both causal alignments, batched (not packed): with 200
// queries on 90 keys bottom-right leaves 110 rows that see no key (dQ = 0, lse = -inf).
// Masks moved by Mask::diagonal_offset (ring attention's chunk pairs), with dQ through atomics
// and through the deterministic kernel, and on the CUDA-core path (f32 inputs).
TEST(CudaBackwardEdges, DiagonalOffsetsMoveEveryMask) {
  for (const auto& [dtype, d] : {std::pair<DType, int>{DType::bf16, 64},
                                 {DType::f16, 128},
                                 {DType::bf16, 256},
                                 {DType::f32, 64}}) {
    for (const CaseSpec& s : diagonal_offset_cases(dtype, d)) {
      SCOPED_TRACE(s.name());
      const CaseData c = make_case(s);
      const BackwardResult oracle = oracle_backward(c), plain = plain_backward(c);
      for (bool deterministic : {false, true}) {
        if (deterministic && dtype == DType::f32) continue;  // one path for f32 inputs
        RunOptions opt;
        opt.deterministic = deterministic;
        expect_grads_match(oracle, plain, run_backward(c, dtype, opt));
      }
    }
  }
}

TEST(CudaBackwardEdges, UnequalLengthsBothAlignments) {
  for (const auto& [len_q, len_k] : {std::pair<std::int64_t, std::int64_t>{200, 90}, {90, 200}})
    for (CausalAlign align : {CausalAlign::top_left, CausalAlign::bottom_right})
      for (bool deterministic : {false, true}) {
        CaseSpec s;
        s.dtype = DType::f16;
        s.seqlens_q = {len_q, len_q};
        s.seqlens_k = {len_k, len_k};
        s.heads_q = 4;
        s.heads_kv = 1;
        s.head_dim = 128;
        s.causal = true;
        s.align = align;
        SCOPED_TRACE(s.name() + (deterministic ? " deterministic" : " atomics"));
        const CaseData c = make_case(s);
        RunOptions opt;
        opt.deterministic = deterministic;
        expect_grads_match(c, run_backward(c, DType::f16, opt));
      }
}

// Many query blocks per key block and many key blocks per query block (the copy pipelines of
// both kernels), GQA 4, strided rows, f32 gradients from bf16 inputs; both dQ modes against one
// oracle run (the fp64 oracle dominates this test's time).
TEST(CudaBackwardEdges, LongCausalStridedF32Gradients) {
  for (int d : {64, 128, 256}) {
    CaseSpec s;
    s.dtype = DType::bf16;
    s.seqlens_q = {520};
    s.seqlens_k = {650};
    s.heads_q = 4;
    s.heads_kv = 1;
    s.head_dim = d;
    s.causal = true;
    s.seed = unsigned(d);
    SCOPED_TRACE(s.name());
    CaseData c = make_case(s);
    c.q = padded_copy(c.q);
    c.k = padded_copy(c.k);
    c.v = padded_copy(c.v);
    c.dout = padded_copy(c.dout);
    const BackwardResult oracle = oracle_backward(c), plain = plain_backward(c);
    for (bool deterministic : {false, true}) {
      SCOPED_TRACE(deterministic ? "deterministic" : "atomics");
      RunOptions opt;
      opt.deterministic = deterministic;
      expect_grads_match(oracle, plain, run_backward(c, DType::f32, opt));
    }
  }
}

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

// dK and dV leave through shared memory in each one's own dtype (f32, or a 16-bit type other than
// the inputs'), into rows longer than d, from key blocks cut short by the sequence's end.
TEST(CudaBackwardEdges, GradientsOfTheirOwnDtypesIntoStridedRows) {
  for (int d : {64, 128, 256}) {
    CaseSpec s;
    s.dtype = DType::bf16;
    s.seqlens_q = {150, 37};
    s.seqlens_k = {197, 70};
    s.varlen = true;
    s.heads_q = 4;
    s.heads_kv = 2;
    s.head_dim = d;
    s.causal = true;
    s.seed = unsigned(d + 5);
    SCOPED_TRACE(s.name());
    const CaseData c = make_case(s);
    const BackwardResult oracle = oracle_backward(c), plain = plain_backward(c);
    for (const auto& [dk_dtype, dv_dtype] :
         {std::pair{DType::f32, DType::f16}, std::pair{DType::f16, DType::f32}}) {
      SCOPED_TRACE(std::string("dk ") + dtype_name(dk_dtype) + ", dv " + dtype_name(dv_dtype));
      RunOptions opt;
      opt.dk_dtype = dk_dtype;
      opt.dv_dtype = dv_dtype;
      opt.padded_grads = true;
      expect_grads_match(oracle, plain, run_backward(c, DType::bf16, opt));
    }
  }
}

// deterministic = true promises bit-identical gradients run after run, on both paths.
TEST(CudaBackwardEdges, DeterministicRepeatsAreBitIdentical) {
  for (DType dtype : {DType::f16, DType::bf16, DType::f32}) {
    CaseSpec s = varlen_spec(dtype, 64, 4);
    s.causal = true;
    SCOPED_TRACE(s.name());
    const CaseData c = make_case(s);
    RunOptions opt;
    opt.deterministic = true;
    const GpuGrads a = run_backward(c, dtype, opt), b = run_backward(c, dtype, opt);
    EXPECT_EQ(a.dq.values(), b.dq.values());
    EXPECT_EQ(a.dk.values(), b.dk.values());
    EXPECT_EQ(a.dv.values(), b.dv.values());
  }
}

// FLASHKIT_SMEM_LIMIT_KB=163 gives the head dims whose dK/dV tile grows with shared memory
// (d = 256: 64 x 32 instead of 64 x 64) the shapes of a 163 KB sm80 device; they meet the oracle
// too, and a bad value is refused by name.
TEST(CudaBackwardEdges, SmallSharedMemoryShapesMatchOracleAndBadLimitsAreRefused) {
  ScopedSmemLimit limit("163");
  for (MaskKind mask : kAllMasks) {
    CaseSpec s = varlen_spec(DType::bf16, 256, 4);
    apply_mask(s, mask);
    SCOPED_TRACE(s.name());
    const CaseData c = make_case(s);
    expect_grads_match(c, run_backward(c, DType::bf16));
  }
  const CaseData c = make_case(varlen_spec(DType::bf16, 256, 2));
  for (const char* bad : {"0", "-4", "16x", ""}) {
    limit.set(bad);
    try {
      run_backward(c, DType::bf16);
      ADD_FAILURE() << "no error for '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), ScopedSmemLimit::kVariable) << e.what();
    }
  }
}

TEST(CudaBackwardEdges, LineageAlgosAreRejected) {
  const CaseData c = make_case(varlen_spec(DType::bf16, 64, 2));
  for (Algo algo : {Algo::naive, Algo::fa1, Algo::fa3}) {
    try {
      RunOptions opt;
      opt.algo = algo;
      run_backward(c, DType::bf16, opt);
      ADD_FAILURE() << "no error for " << algo_name(algo);
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), "algo") << e.what();
    }
  }
}

}  // namespace
}  // namespace flashkit::testing
