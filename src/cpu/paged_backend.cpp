#include <string>

#include "cpu/paged_backend.hpp"

namespace flashkit::cpu {

namespace {

// Head dims the CPU runs: MLA's 576-wide keys (512 latent + 64 rotary) and room above. The bound
// keeps a task's key block (64 rows of K and of V in fp32: 256 KiB each at 1024) within L2.
constexpr std::int64_t kMaxHeadDim = 1024;

}  // namespace

void paged_attention(const PagedAttentionArgs& args, const core::PagedDims& dims) {
  if (dims.head_dim > kMaxHeadDim) {
    core::fail("q.shape[-1]", "a head dim in 1.." + std::to_string(kMaxHeadDim) + " on the cpu",
               std::to_string(dims.head_dim));
  }
  if (dims.head_dim_v > kMaxHeadDim) {
    core::fail("kv.v_pages.shape[3]",
               "a head dim in 1.." + std::to_string(kMaxHeadDim) + " on the cpu",
               std::to_string(dims.head_dim_v));
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
