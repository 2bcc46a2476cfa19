#include "cpu/cpu_backend.hpp"

#include <string>

namespace flashkit::cpu {

namespace {

// Head dims the CPU backend runs: any from 1 to 512.
constexpr std::int64_t kMaxHeadDim = 512;

void check_head_dims(const core::ProblemDims& d) {
  if (d.head_dim > kMaxHeadDim) {
    core::fail("q.shape[-1]", "a head dim in 1.." + std::to_string(kMaxHeadDim) + " on the cpu",
               std::to_string(d.head_dim));
  }
  if (d.head_dim_v > kMaxHeadDim) {
    core::fail("v.shape[-1]", "a head dim in 1.." + std::to_string(kMaxHeadDim) + " on the cpu",
               std::to_string(d.head_dim_v));
  }
}

}  // namespace

void forward(const AttentionArgs& args, const core::ProblemDims& dims) {
  check_head_dims(dims);
  switch (args.algo) {
    case Algo::reference:
      return reference_forward(args, dims);
    case Algo::naive:
      return naive_forward(args, dims);
    case Algo::automatic:
    case Algo::fa2:
      // f64 inputs ask for f64 accuracy (gradcheck): the oracle is the f64 path.
      if (args.q.dtype() == DType::f64) return reference_forward(args, dims);
      return tiled_forward(args, dims);
    default:
      core::fail("algo", "automatic, reference, naive or fa2 on the cpu", algo_name(args.algo));
  }
}

void backward(const BackwardArgs& args, const core::ProblemDims& dims) {
  check_head_dims(dims);
  switch (args.algo) {
    case Algo::reference:
      return reference_backward(args, dims);
    case Algo::automatic:
    case Algo::fa2:
      if (args.q.dtype() == DType::f64) return reference_backward(args, dims);
      return tiled_backward(args, dims);
    default:
      core::fail("algo", "automatic, reference or fa2 for the cpu backward", algo_name(args.algo));
  }
}

}  // namespace flashkit::cpu
