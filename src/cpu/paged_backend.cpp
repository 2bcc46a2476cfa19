#include <string>

#include "cpu/paged_backend.hpp"

namespace flashkit::cpu {

namespace {

// Head dims the CPU runs, as for the contiguous forward.
constexpr std::int64_t kMaxHeadDim = 512;

}  // namespace

void paged_attention(const PagedAttentionArgs& args, const core::PagedDims& dims) {
  if (dims.head_dim > kMaxHeadDim) {
    core::fail("q.shape[-1]", "a head dim in 1.." + std::to_string(kMaxHeadDim) + " on the cpu",
               std::to_string(dims.head_dim));
  }
  switch (args.algo) {
    case Algo::reference:
      return paged_reference(args, dims);
    case Algo::automatic:
      return paged_fast(args, dims);
    default:
      core::fail("algo", "automatic or reference for paged attention on the cpu",
                 algo_name(args.algo));
  }
}

}  // namespace flashkit::cpu
