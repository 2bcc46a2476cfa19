// merge_states on CUDA: one warp per (token, head) folds the S partial states with
// core::merge_weights, the same weights split-K, cascade and ring attention use.
#include <cstdint>
#include <limits>

#include "core/softmax_state.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/device.hpp"
#include "cuda/common/dtype.cuh"
#include "cuda/cuda_backend.hpp"

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

__global__ void merge_kernel(MergeParams p) {
  const std::int64_t pair = std::int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (pair >= std::int64_t(p.tokens) * p.heads) return;
  const std::int64_t t = pair / p.heads, h = pair % p.heads;
  for (int e0 = 0; e0 < p.dim; e0 += 32) {
    const int e = e0 + lane;
    float lse = -std::numeric_limits<float>::infinity();
    float o = 0.0f;
    for (int s = 0; s < p.states; ++s) {
      const float lse_s =
          p.states_lse[s * p.sl_stride[0] + t * p.sl_stride[1] + h * p.sl_stride[2]];
      const core::MergeWeights<float> w = core::merge_weights(lse, lse_s);
      // A state that saw no key weighs 0 and is never read (its o may be anything).
      const float o_s =
          (e < p.dim && w.w_b > 0.0f)
              ? load_as_float(p.states_o, p.in_dtype,
                              s * p.so_stride[0] + t * p.so_stride[1] + h * p.so_stride[2] + e)
              : 0.0f;
      o = w.w_a * o + w.w_b * o_s;
      lse = w.lse;
    }
    if (e < p.dim) {
      store_from_float(p.out, p.out_dtype, t * p.o_stride[0] + h * p.o_stride[1] + e, o);
    }
    if (e0 == 0 && lane == 0 && p.out_lse != nullptr) {
      p.out_lse[t * p.ol_stride[0] + h * p.ol_stride[1]] = lse;
    }
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
