// Backward dispatch on CUDA: the kernels' own limits, then the fp32 FA2-order backward.
#include <string>
#include <utility>

#include "cuda/bwd/bwd.hpp"
#include "cuda/common/device.hpp"
#include "cuda/common/make_params.hpp"
#include "cuda/cuda_backend.hpp"

namespace flashkit::cuda {

void backward(const BackwardArgs& args, const core::ProblemDims& dims) {
  current_device_capability("q", args.q.device());
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
  backward_simt(p, static_cast<cudaStream_t>(args.stream));
}

}  // namespace flashkit::cuda
