// merge_states on CUDA: one warp per (token, head) combines the S partial states with the
// weights of core::merge_weights (the same split-K, cascade and ring attention use).
#include <cstdint>
#include <limits>

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/device.hpp"
#include "cuda/common/dtype.cuh"
#include "cuda/cuda_backend.hpp"
#include "cuda/ptx/warp_reduce.cuh"

namespace flashkit::cuda {

namespace {

struct MergeParams {
  const void* states_o;
  const float* states_lse;
  void* out;
  float* out_lse;  // null: not asked for
  std::int64_t so_stride[4], sl_stride[3], o_stride[3], ol_stride[2];
  int states, tokens, heads, dim;
  DType in_dtype, out_dtype;
};

// The S-way form of core::merge_weights: with m = max_s lse_s and w_s = exp(lse_s - m),
// o = sum_s w_s o_s / sum_s w_s and lse = m + log(sum_s w_s). Folding the states pairwise (as the
// CPU does) chains every load behind the previous state's weights: with 10 states and d = 128,
// 40 dependent global loads per warp, a latency-bound kernel on a decode batch (cascade merges
// up to 17 states). Here the lse loads, then the o loads, are independent of each other.
__global__ void merge_kernel(MergeParams p) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const std::int64_t pair = std::int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (pair >= std::int64_t(p.tokens) * p.heads) return;
  const std::int64_t t = pair / p.heads, h = pair % p.heads;
  const float* lse = p.states_lse + t * p.sl_stride[1] + h * p.sl_stride[2];
  float m = kNegInf;
  for (int s = lane; s < p.states; s += 32) m = fmaxf(m, lse[s * p.sl_stride[0]]);
  m = ptx::warp_max(m);
  // exp(lse_s - m) for a state that saw no key (-inf) is 0: it weighs nothing and its o (which
  // may be anything) is never used.
  auto weight = [&](int s) { return m == kNegInf ? 0.0f : expf(lse[s * p.sl_stride[0]] - m); };
  float l = 0.0f;
  for (int s = lane; s < p.states; s += 32) l += weight(s);
  l = ptx::warp_sum(l);
  const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
  const std::int64_t o0 = t * p.so_stride[1] + h * p.so_stride[2];
  for (int e = lane; e < p.dim; e += 32) {
    float o = 0.0f;
#pragma unroll 4
    for (int s = 0; s < p.states; ++s) {
      const float w = weight(s);
      const float o_s = load_as_float(p.states_o, p.in_dtype, o0 + s * p.so_stride[0] + e);
      o += w > 0.0f ? w * o_s : 0.0f;
    }
    store_from_float(p.out, p.out_dtype, t * p.o_stride[0] + h * p.o_stride[1] + e, o * inv_l);
  }
  if (lane == 0 && p.out_lse != nullptr) {
    p.out_lse[t * p.ol_stride[0] + h * p.ol_stride[1]] = l > 0.0f ? m + logf(l) : kNegInf;
  }
}

}  // namespace

void merge(const MergeArgs& args, const core::MergeDims& dims) {
  current_device_capability("states_o", args.states_o.device());
  core::expect_dtype_in("states_o", args.states_o, {DType::f32, DType::f16, DType::bf16});
  core::expect_dtype_in("out", args.out, {DType::f32, DType::f16, DType::bf16});
  MergeParams p{};
  p.states_o = args.states_o.data();
  p.states_lse = args.states_lse.data_as<const float>();
  p.out = args.out.data();
  p.out_lse = args.out_lse.defined() ? args.out_lse.data_as<float>() : nullptr;
  for (int i = 0; i < 4; ++i) p.so_stride[i] = args.states_o.stride(i);
  for (int i = 0; i < 3; ++i) p.sl_stride[i] = args.states_lse.stride(i);
  for (int i = 0; i < 3; ++i) p.o_stride[i] = args.out.stride(i);
  if (p.out_lse != nullptr) {
    for (int i = 0; i < 2; ++i) p.ol_stride[i] = args.out_lse.stride(i);
  }
  p.states = int(dims.states);
  p.tokens = int(dims.tokens);
  p.heads = int(dims.heads);
  p.dim = int(dims.head_dim);
  p.in_dtype = args.states_o.dtype();
  p.out_dtype = args.out.dtype();
  const std::int64_t pairs = dims.tokens * dims.heads;
  if (pairs == 0) return;
  constexpr int kWarps = 8;
  merge_kernel<<<unsigned((pairs + kWarps - 1) / kWarps), 32 * kWarps, 0,
                 static_cast<cudaStream_t>(args.stream)>>>(p);
  check_launch("merge_states kernel");
}

}  // namespace flashkit::cuda
