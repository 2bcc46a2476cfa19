// Stage-1 launch: picks the compiled variant (decode_shape.cuh's lists) for the call's head dim
// and query rows per CTA. Included by the per-dtype instance files only.
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <type_traits>
#include <utility>

#include "cuda/common/cuda_check.hpp"
#include "cuda/decode/decode_kernel.cuh"
#include "cuda/decode/decode_launch.hpp"
#include "cuda/decode/decode_shape.cuh"
#include "cuda/decode/mma_kernel.cuh"
#include "cuda/decode/mma_shape.cuh"
#include "flashkit/error.hpp"

namespace flashkit::cuda::decode {

// Calls f(std::integral_constant<int, v>) for the v of the list equal to `value`; false if none.
template <int... kValues, class F>
bool dispatch_int(std::integer_sequence<int, kValues...>, int value, F&& f) {
  return ((value == kValues && (f(std::integral_constant<int, kValues>{}), true)) || ...);
}

template <int... kValues>
constexpr bool in_list(std::integer_sequence<int, kValues...>, int value) {
  return ((value == kValues) || ...);
}

template <class KvElem, int kHeadDim, int kRows>
void launch_decode_variant(const PagedParams& p, cudaStream_t stream) {
  using Shape = DecodeShape<KvElem, kHeadDim, kRows>;
  const auto kernel = paged_decode_kernel<KvElem, kHeadDim, kRows>;
  // Over 48 KB of dynamic shared memory must be opted into (per kernel; cheap to repeat).
  check_cuda(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Shape::kSmemBytes),
      "cudaFuncSetAttribute(paged decode kernel)");
  const dim3 grid(unsigned(p.heads_kv * p.row_tiles), unsigned(p.num_splits), unsigned(p.batch));
  kernel<<<grid, Shape::kThreads, Shape::kSmemBytes, stream>>>(p);
  check_launch("paged decode kernel");
}

template <class KvElem, int kHeadDim, int kWarps, bool kFold = false>
void launch_mma_variant(const PagedParams& p, cudaStream_t stream) {
  using Shape = MmaShape<KvElem, kHeadDim, kWarps>;
  if constexpr (!kFold && mma_folds<KvElem>(kWarps)) {
    if (p.prior_states > 0) return launch_mma_variant<KvElem, kHeadDim, kWarps, true>(p, stream);
  }
  const auto kernel = paged_decode_mma_kernel<KvElem, kHeadDim, kWarps, kFold>;
  check_cuda(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Shape::kSmemBytes),
      "cudaFuncSetAttribute(paged decode mma kernel)");
  const dim3 grid(unsigned(p.heads_kv * p.row_tiles), unsigned(p.num_splits), unsigned(p.batch));
  kernel<<<grid, Shape::kThreads, Shape::kSmemBytes, stream>>>(p);
  check_launch("paged decode mma kernel");
}

template <class KvElem>
void launch_decode(const PagedParams& p, cudaStream_t stream) {
  bool launched = false;
  dispatch_int(HeadDims{}, p.head_dim, [&](auto d) {
    if (p.mma_warps > 0) {
      if constexpr (in_list(MmaHeadDims{}, decltype(d)::value)) {
        launched = dispatch_int(MmaWarpCounts{}, p.mma_warps, [&](auto w) {
          launch_mma_variant<KvElem, decltype(d)::value, decltype(w)::value>(p, stream);
        });
      }
      return;
    }
    launched = dispatch_int(RowTiles<KvElem>{}, p.rows_per_cta, [&](auto r) {
      launch_decode_variant<KvElem, decltype(d)::value, decltype(r)::value>(p, stream);
    });
  });
  if (!launched) {
    throw Error("paged decode: no kernel compiled for head dim " + std::to_string(p.head_dim) +
                " with " + std::to_string(p.rows_per_cta) + " query rows per CTA");
  }
}

}  // namespace flashkit::cuda::decode
