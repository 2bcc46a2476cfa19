// Forward dispatch on CUDA: checks the kernels' own limits, then picks one.
#include <cstdint>
#include <string>
#include <utility>

#include "cuda/common/device.hpp"
#include "cuda/common/fwd_params.hpp"
#include "cuda/common/make_params.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/fwd_fp32.hpp"
#include "cuda/lineage/lineage.hpp"
#include "cuda/sm80/fwd_sm80.hpp"
#if FLASHKIT_HAVE_SM90
#include "cuda/sm90/fwd_sm90.hpp"
#endif

namespace flashkit::cuda {

namespace {

std::string num(std::int64_t v) {
  return std::to_string(v);
}

// What the sm80 kernel needs beyond validation; throws naming the argument.
void check_fa2(const AttentionArgs& a, const core::ProblemDims& d, int capability) {
  if (capability < 80) {
    core::fail("q.device", "compute capability >= 8.0 for algo fa2 (mma.sync bf16, cp.async)",
               "sm_" + num(capability));
  }
  if (!sm80::fwd_has_head_dim(int(d.head_dim))) {
    core::fail("q.shape[-1]", "a head dim in " + sm80::fwd_head_dims_text() + " for algo fa2",
               num(d.head_dim));
  }
  if (d.head_dim_v != d.head_dim) {
    core::fail("v.shape[-1]", num(d.head_dim) + " (the head dim of q) for algo fa2",
               num(d.head_dim_v));
  }
  if (a.out.dtype() != a.q.dtype() && a.out.dtype() != DType::f32) {
    core::fail("out.dtype",
               std::string(dtype_name(a.q.dtype())) + " (the dtype of q) or f32 for algo fa2",
               dtype_name(a.out.dtype()));
  }
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"q", &a.q},
                                {"k", &a.k},
                                {"v", &a.v},
                                {"out", &a.out}}) {
    check_cp_async_rows(name, *t);
  }
}

// The sm90 forward takes what the sm80 one takes (check_fa2), on compute capability 9.0 only
// (its code is sm_90a), for the head dims it was compiled for.
bool fa3_runs(const core::ProblemDims& d, int capability) {
#if FLASHKIT_HAVE_SM90
  return capability == 90 && sm90::fwd_has_head_dim(int(d.head_dim));
#else
  (void)d;
  (void)capability;
  return false;
#endif
}

void check_fa3(const AttentionArgs& a, const core::ProblemDims& d, int capability) {
#if FLASHKIT_HAVE_SM90
  core::expect_dtype_in("q", a.q, {DType::f16, DType::bf16});
  if (capability != 90) {
    core::fail("q.device", "compute capability 9.0 for algo fa3 (wgmma, TMA: sm_90a code)",
               "sm_" + num(capability));
  }
  if (!sm90::fwd_has_head_dim(int(d.head_dim))) {
    core::fail("q.shape[-1]", "a head dim in " + sm90::fwd_head_dims_text() + " for algo fa3",
               num(d.head_dim));
  }
  check_fa2(a, d, capability);
#else
  (void)a;
  (void)d;
  (void)capability;
  core::fail("algo", "a build with CUDA architecture 90a for fa3 (FLASHKIT_CUDA_ARCHS)", "fa3");
#endif
}

}  // namespace

void forward(const AttentionArgs& args, const core::ProblemDims& dims) {
  const int capability = current_device_capability("q", args.q.device());
  core::expect_dtype_in("q", args.q, {DType::f32, DType::f16, DType::bf16});
  core::expect_dtype_in("out", args.out, {DType::f32, DType::f16, DType::bf16});
  check_index_ranges(args, dims);
  Algo algo = args.algo;
  if (algo == Algo::reference) {
    core::fail("algo", "automatic, naive, fa1, fa2 or fa3 on cuda", algo_name(algo));
  }
  if (algo == Algo::fa3) check_fa3(args, dims, capability);
  // f32 inputs: the tensor-core path would round them to 16 bits. FA2's loop order on CUDA cores
  // keeps them in fp32 where its tiles fit (head dims <= 256); FA1's fp32 loop takes the rest.
  bool fp32_flash = false;
  if (args.q.dtype() == DType::f32 && (algo == Algo::automatic || algo == Algo::fa2)) {
    fp32_flash = fwd_fp32_runs(int(dims.head_dim), int(dims.head_dim_v), tile_smem_limit());
    algo = Algo::fa1;
  }
  if (algo == Algo::fa1 && (dims.head_dim > kFa1MaxHeadDim || dims.head_dim_v > kFa1MaxHeadDim)) {
    core::fail("q.shape[-1]", "head dims <= " + num(kFa1MaxHeadDim) + " for the fa1 kernel",
               num(dims.head_dim) + " (q) / " + num(dims.head_dim_v) + " (v)");
  }
  if (algo == Algo::automatic || algo == Algo::fa2) check_fa2(args, dims, capability);
  if (algo == Algo::automatic && fa3_runs(dims, capability)) algo = Algo::fa3;

  const FwdParams p = make_fwd_params(args, args.out, args.lse, dims);
  const auto stream = static_cast<cudaStream_t>(args.stream);
  if (fp32_flash) return fwd_fp32(p, multiprocessor_count(args.q.device()), stream);
  switch (algo) {
    case Algo::naive:
      return naive_forward(p, stream);
    case Algo::fa1:
      return fa1_forward(p, stream);
    case Algo::fa3:
#if FLASHKIT_HAVE_SM90
      return sm90::fwd(args, dims, p, stream);
#endif
    default:
      return sm80::fwd(p, stream);
  }
}

}  // namespace flashkit::cuda
