// The paged entry points: plan the key split, validate, hand the call to the tensors' backend.
#include <string>

#include "core/key_splits.hpp"
#include "core/validate.hpp"
#include "cpu/paged_backend.hpp"
#include "cpu/parallel.hpp"
#include "flashkit/error.hpp"
#include "flashkit/paged.hpp"

#if FLASHKIT_HAVE_CUDA
#include "cuda/common/device.hpp"
#include "cuda/decode/decode_backend.hpp"
#include "cuda/paged_fwd.hpp"
#endif

namespace flashkit {

namespace {

// A split below this many keys costs more (loading the queries, writing and merging a partial
// state) than the parallelism it adds is worth.
constexpr std::int64_t kMinKeysPerSplit = 256;
// More splits only grow the workspace and stage 2: 64 already fills 132 SMs from one KV head.
constexpr std::int64_t kMaxSplits = 64;
// Decode CTAs per processor the plan fills: 2, the tensor-core kernel's 4-warp CTAs two per SM
// (8 warps, the most its ~197 registers allow; cuda/decode/mma_shape.cuh). Measured on the H200
// (docs/kernels/decode.md, v3.8): whole waves of those beat both fewer splits and twice as many
// (2-warp CTAs, 4 per SM), which add a merge for no more warps. On a CPU, tasks per thread.
constexpr std::int64_t kCtasPerProcessor = 2;

void expect_at_least(const char* name, std::int64_t value, std::int64_t least) {
  if (value < least) {
    core::fail(std::string("plan_paged_split.") + name, ">= " + std::to_string(least),
               std::to_string(value));
  }
}

// Processors the split plan fills: CPU threads, or the SMs of the tensors' GPU.
int processors(const Device& device) {
  if (device.is_cpu()) return cpu::num_threads();
#if FLASHKIT_HAVE_CUDA
  return cuda::multiprocessor_count(device);  // 1 for a bad device: the backend reports it, named
#else
  return 1;  // CUDA tensors are refused right after validation
#endif
}

#if FLASHKIT_HAVE_CUDA
#else
[[noreturn]] void no_backend(const std::string& argument, const Device& device) {
  core::fail(argument + ".device", "cpu (this build has no CUDA backend)", device.str());
}
#endif

}  // namespace

std::int64_t paged_workspace_elems(std::int64_t num_splits, std::int64_t query_rows,
                                   std::int64_t heads_q, std::int64_t head_dim_v) {
  return num_splits > 1 ? num_splits * query_rows * heads_q * (head_dim_v + 1) : 0;
}

PagedSplitPlan plan_paged_split(std::int64_t batch, std::int64_t q_len, std::int64_t heads_q,
                                std::int64_t heads_kv, std::int64_t head_dim_v,
                                std::int64_t max_seq_len, int processors) {
  expect_at_least("batch", batch, 0);
  expect_at_least("q_len", q_len, 0);
  expect_at_least("heads_kv", heads_kv, 1);
  expect_at_least("heads_q", heads_q, heads_kv);
  expect_at_least("head_dim_v", head_dim_v, 1);
  expect_at_least("max_seq_len", max_seq_len, 0);
  expect_at_least("processors", processors, 1);
  // Unsplit, one task per (sequence, KV head) with its whole query group; split when that leaves
  // processors idle, as far as every split keeps kMinKeysPerSplit keys.
  const std::int64_t splits = core::one_wave_key_splits(
      batch * heads_kv, processors, kCtasPerProcessor, max_seq_len, kMinKeysPerSplit, kMaxSplits);
  return {int(splits), paged_workspace_elems(splits, batch * q_len, heads_q, head_dim_v)};
}

void paged_attention(const PagedAttentionArgs& args) {
  const core::PagedDims dims = core::validate_paged(args, processors(args.q.device()));
  if (args.q.device().is_cpu()) return cpu::paged_attention(args, dims);
#if FLASHKIT_HAVE_CUDA
  if (cuda::paged_fwd_preferred(args, dims)) return cuda::paged_fwd(args, dims);
  return cuda::paged_attention(args, dims);
#else
  no_backend("q", args.q.device());
#endif
}

void append_kv(const AppendKVArgs& args) {
  const core::AppendDims dims = core::validate_append(args);
  if (args.k_new.device().is_cpu()) return cpu::append_kv(args, dims);
#if FLASHKIT_HAVE_CUDA
  return cuda::append_kv(args, dims);
#else
  no_backend("k_new", args.k_new.device());
#endif
}

}  // namespace flashkit
