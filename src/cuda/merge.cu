// merge_states on CUDA: one warp per (token, head, 32 or 128 elements of the head dim) combines
// the S partial states with the weights of core::merge_weights, in its warp form
// (common/warp_merge.cuh, shared with the paged decode's split merge).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>
#include <cstdint>
#include <string>

#include "core/validate.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/device.hpp"
#include "cuda/common/dtype.cuh"
#include "cuda/common/warp_merge.cuh"
#include "cuda/cuda_backend.hpp"

namespace flashkit::cuda {

namespace {

struct MergeParams {
  const void* states_o;
  const float* states_lse;
  void* out;
  float* out_lse;  // null: not asked for
  std::int64_t so_stride[4], sl_stride[3], o_stride[3], ol_stride[2];
  int states, tokens, heads, dim, chunks;  // chunks: the head dim's pieces of 32 lanes' elements
  DType in_dtype, out_dtype;
};

constexpr int kWarps = 4;
// States whose loads are in flight together, one element per lane: cascade merges up to 17 (its
// shared level's key splits and the suffix), ring attention one per rank.
constexpr int kWideRound = 32;

// A warp per (token, head, chunk of 32 * kVec elements): lane l owns elements chunk * 32 * kVec
// + l * kVec + [0, kVec), so the warp's load of one state is contiguous (128 bytes of f32 states
// with kVec 1, 512 with kVec 4). State: the states' element type (no run-time dtype switch inside
// the unrolled loads).
template <class State, int kRound, int kVec>
__global__ void __launch_bounds__(32 * kWarps) merge_kernel(const __grid_constant__ MergeParams p) {
  const std::int64_t item = std::int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (item >= std::int64_t(p.tokens) * p.heads * p.chunks) return;  // warp-uniform
  const std::int64_t pair = item / p.chunks;
  const int chunk = int(item % p.chunks), e = (chunk * 32 + int(threadIdx.x % 32)) * kVec;
  const std::int64_t t = pair / p.heads, h = pair % p.heads;
  const float* lse = p.states_lse + t * p.sl_stride[1] + h * p.sl_stride[2];
  const State* o = static_cast<const State*>(p.states_o) + t * p.so_stride[1] + h * p.so_stride[2] +
                   (e < p.dim ? e : 0) * p.so_stride[3];
  float merged[kVec], merged_lse;
  warp_merge<kRound, kVec>(p.states, lse, p.sl_stride[0], o, p.so_stride[0], e < p.dim, merged,
                           merged_lse);
  if (e < p.dim) {
#pragma unroll
    for (int v = 0; v < kVec; ++v) {
      store_from_float(p.out, p.out_dtype, t * p.o_stride[0] + h * p.o_stride[1] + e + v,
                       merged[v]);
    }
  }
  if (e == 0 && p.out_lse != nullptr) {
    p.out_lse[t * p.ol_stride[0] + h * p.ol_stride[1]] = merged_lse;
  }
}

// Four elements per lane need whole, aligned 4-element runs: unit element stride, the other
// strides multiples of 4 and the base aligned to 4 elements.
bool four_per_lane(const MergeArgs& args, std::int64_t dim) {
  const Tensor& o = args.states_o;
  const auto bytes = std::uintptr_t(o.data());
  return dim % 4 == 0 && o.stride(3) == 1 && o.stride(0) % 4 == 0 && o.stride(1) % 4 == 0 &&
         o.stride(2) % 4 == 0 && bytes % (4 * dtype_size(o.dtype())) == 0;
}

template <class State>
void launch_merge(MergeParams p, bool vec, cudaStream_t stream) {
  const auto launch = [&](auto kernel, int elems_per_lane) {
    p.chunks = (p.dim + 32 * elems_per_lane - 1) / (32 * elems_per_lane);
    const std::int64_t items = std::int64_t(p.tokens) * p.heads * p.chunks;
    kernel<<<unsigned((items + kWarps - 1) / kWarps), 32 * kWarps, 0, stream>>>(p);
  };
  with_merge_round<kWideRound>(p.states, [&](auto round) {
    constexpr int kRound = decltype(round)::value;
    if constexpr (kRound != kWideRound) {
      if (vec) return launch(merge_kernel<State, kRound, 4>, 4);
    }
    launch(merge_kernel<State, kWideRound, 1>, 1);
  });
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
  // The one-element-per-lane grid is the larger: its size bounds both.
  const std::int64_t items = dims.tokens * dims.heads * ((dims.head_dim + 31) / 32);
  if (items == 0) return;
  if ((items + kWarps - 1) / kWarps > INT_MAX) {
    core::fail(
        "states_o.shape",
        "fewer than 2^31 * " + std::to_string(kWarps) + " (token, head, 32 elements) items on cuda",
        args.states_o.shape_str());
  }
  const bool vec = four_per_lane(args, dims.head_dim);
  const auto stream = static_cast<cudaStream_t>(args.stream);
  switch (p.in_dtype) {
    case DType::f16:
      launch_merge<__half>(p, vec, stream);
      break;
    case DType::bf16:
      launch_merge<__nv_bfloat16>(p, vec, stream);
      break;
    default:
      launch_merge<float>(p, vec, stream);
      break;
  }
  check_launch("merge_states kernel");
}

}  // namespace flashkit::cuda
