// The public entry points: validate, then hand the call to the backend of the tensors' device.
#include "core/validate.hpp"
#include "cpu/cpu_backend.hpp"
#include "flashkit/attention.hpp"
#include "flashkit/error.hpp"

#if FLASHKIT_HAVE_CUDA
#include "cuda/cuda_backend.hpp"
#endif

namespace flashkit {

const char* algo_name(Algo algo) noexcept {
  switch (algo) {
    case Algo::automatic:
      return "automatic";
    case Algo::reference:
      return "reference";
    case Algo::naive:
      return "naive";
    case Algo::fa1:
      return "fa1";
    case Algo::fa2:
      return "fa2";
    case Algo::fa3:
      return "fa3";
  }
  return "?";
}

#if !FLASHKIT_HAVE_CUDA
namespace {

[[noreturn]] void no_backend(const std::string& argument, const Device& device) {
  core::fail(argument + ".device", "cpu (this build has no CUDA backend)", device.str());
}

}  // namespace
#endif

void attention_forward(const AttentionArgs& args) {
  const core::ProblemDims dims = core::validate_forward(args);
  if (args.q.device().is_cpu()) return cpu::forward(args, dims);
#if FLASHKIT_HAVE_CUDA
  return cuda::forward(args, dims);
#else
  no_backend("q", args.q.device());
#endif
}

void attention_backward(const BackwardArgs& args) {
  const core::ProblemDims dims = core::validate_backward(args);
  if (args.q.device().is_cpu()) return cpu::backward(args, dims);
#if FLASHKIT_HAVE_CUDA
  return cuda::backward(args, dims);
#else
  no_backend("q", args.q.device());
#endif
}

void merge_states(const MergeArgs& args) {
  const core::MergeDims dims = core::validate_merge(args);
  if (args.states_o.device().is_cpu()) return cpu::merge(args, dims);
#if FLASHKIT_HAVE_CUDA
  return cuda::merge(args, dims);
#else
  no_backend("states_o", args.states_o.device());
#endif
}

}  // namespace flashkit
