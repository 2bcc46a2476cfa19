// Backward dispatch on CUDA: the kernels' own limits, then the tensor-core backward for f16/bf16
// (sm80+, d_v = d compiled in, 16-byte aligned rows) or the fp32 CUDA-core one for the rest.
#include <cstdint>
#include <string>
#include <utility>

#include "cuda/bwd/bwd.hpp"
#include "cuda/bwd/sm80_bwd.hpp"
#include "cuda/common/device.hpp"
#include "cuda/common/make_params.hpp"
#include "cuda/cuda_backend.hpp"

namespace flashkit::cuda {

namespace {

// cp.async's 16-byte rows (cuda/common/device.hpp), as a question instead of an error.
bool rows_are_16_byte_aligned(const Tensor& t) {
  if (reinterpret_cast<std::uintptr_t>(t.data()) % 16 != 0) return false;
  const std::int64_t elems = 16 / std::int64_t(dtype_size(t.dtype()));
  for (int i = 0; i + 1 < t.rank(); ++i) {
    if (t.stride(i) % elems != 0) return false;
  }
  return true;
}

bool tensor_cores_apply(const BackwardArgs& a, const core::ProblemDims& d, int capability) {
  if (capability < 80 || a.q.dtype() == DType::f32 || d.head_dim_v != d.head_dim ||
      !sm80::bwd_has_head_dim(int(d.head_dim))) {
    return false;
  }
  for (const Tensor* t : {&a.q, &a.k, &a.v, &a.dout, &a.dq, &a.dk, &a.dv}) {
    if (!rows_are_16_byte_aligned(*t)) return false;
  }
  return true;
}

}  // namespace

void backward(const BackwardArgs& args, const core::ProblemDims& dims) {
  const int capability = current_device_capability("q", args.q.device());
  core::expect_dtype_in("q", args.q, {DType::f32, DType::f16, DType::bf16});
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"out", &args.out},
                                {"dout", &args.dout},
                                {"dq", &args.dq},
                                {"dk", &args.dk},
                                {"dv", &args.dv}}) {
    core::expect_dtype_in(name, *t, {DType::f32, DType::f16, DType::bf16});
  }
  if (args.dout.dtype() != args.q.dtype()) {
    core::fail("dout.dtype", std::string(dtype_name(args.q.dtype())) + " (the dtype of q)",
               dtype_name(args.dout.dtype()));
  }
  if (args.algo != Algo::automatic && args.algo != Algo::fa2) {
    core::fail("algo", "automatic or fa2 for the CUDA backward", algo_name(args.algo));
  }
  if (dims.head_dim > kBwdMaxHeadDim || dims.head_dim_v > kBwdMaxHeadDim) {
    core::fail(
        "q.shape[-1]", "head dims <= " + std::to_string(kBwdMaxHeadDim) + " for the CUDA backward",
        std::to_string(dims.head_dim) + " (q) / " + std::to_string(dims.head_dim_v) + " (v)");
  }
  check_index_ranges(args, dims);
  BwdParams p{};
  p.f = make_fwd_params(args, args.out, args.lse, dims);
  p.dout = args.dout.data();
  p.dq = args.dq.data();
  p.dk = args.dk.data();
  p.dv = args.dv.data();
  p.dout_layout = core::token_layout(args.dout, dims.varlen);
  p.dq_layout = core::token_layout(args.dq, dims.varlen);
  p.dk_layout = core::token_layout(args.dk, dims.varlen);
  p.dv_layout = core::token_layout(args.dv, dims.varlen);
  p.dq_dtype = args.dq.dtype();
  p.dk_dtype = args.dk.dtype();
  p.dv_dtype = args.dv.dtype();
  p.q_tokens = dims.varlen ? args.q.size(0) : dims.batch * dims.seqlen_q;
  const auto stream = static_cast<cudaStream_t>(args.stream);
  if (tensor_cores_apply(args, dims, capability)) {
    sm80::bwd(p, args.deterministic, stream);
  } else {
    backward_simt(p, stream);
  }
}

}  // namespace flashkit::cuda
