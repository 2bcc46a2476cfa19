// apply_rotary on CUDA: a thread per (token, head, pair), plus one per element past rotary_dim,
// which it copies. Each pair is read whole before it is written, so out may be x itself. The
// kernel is memory-bound (a few flops per element), so elements go one at a time through the
// run-time dtype switch of common/dtype.cuh. Positions come from device memory, unchecked by
// validation: one outside [0, max_positions) makes its pair NaN instead of reading past cos / sin.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "core/problem.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/device.hpp"
#include "cuda/common/dtype.cuh"
#include "cuda/rotary.hpp"

namespace flashkit::cuda {

namespace {

struct RotaryParams {
  const void* x;
  void* out;
  const void* cos;
  const void* sin;
  const std::int32_t* cu_seqlens;  // packed only
  const std::int32_t* offsets;     // RotaryPositions::offsets
  const std::int32_t* ids;         // RotaryPositions::ids
  core::TokenLayout x_layout, out_layout;
  std::int64_t cos_stride[2], sin_stride[2];
  std::int64_t cu_stride, offsets_stride, ids_stride[2];
  std::int64_t batch, rows, heads, head_dim, half, max_positions;
  DType x_dtype, out_dtype, cos_dtype, sin_dtype;
  core::RotaryPositions positions;
  bool packed, interleaved, conjugate;
};

// Sequence of packed row r (the last b with cu_seqlens[b] <= r), or -1 past the last sequence.
__device__ std::int64_t sequence_of(const RotaryParams& p, std::int64_t r) {
  if (r >= p.cu_seqlens[p.batch * p.cu_stride]) return -1;
  std::int64_t lo = 0, hi = p.batch - 1;  // cu_seqlens[lo] <= r < cu_seqlens[hi + 1]
  while (lo < hi) {
    const std::int64_t mid = (lo + hi + 1) / 2;
    if (p.cu_seqlens[mid * p.cu_stride] <= r) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

__global__ void rotary_kernel(const __grid_constant__ RotaryParams p) {
  const std::int64_t per_head = p.half + (p.head_dim - 2 * p.half);
  const std::int64_t items = p.rows * p.heads * per_head;
  for (std::int64_t item = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; item < items;
       item += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t j = item % per_head, h = (item / per_head) % p.heads;
    const std::int64_t r = item / (per_head * p.heads);
    // Row r: sequence b, token i of it, at element offsets xo / oo.
    std::int64_t b = 0, i = 0, xo = 0, oo = 0;
    if (p.packed) {
      b = sequence_of(p, r);
      if (b < 0) continue;  // rows past the last sequence are not written
      i = r - p.cu_seqlens[b * p.cu_stride];
      xo = r * p.x_layout.token_stride;
      oo = r * p.out_layout.token_stride;
    } else {
      const std::int64_t seqlen = p.rows / p.batch;
      b = r / seqlen;
      i = r % seqlen;
      xo = b * p.x_layout.batch_stride + i * p.x_layout.token_stride;
      oo = b * p.out_layout.batch_stride + i * p.out_layout.token_stride;
    }
    xo += h * p.x_layout.head_stride;
    oo += h * p.out_layout.head_stride;
    if (j >= p.half) {  // past rotary_dim: copied
      const std::int64_t e = 2 * p.half + (j - p.half);
      store_from_float(p.out, p.out_dtype, oo + e, load_as_float(p.x, p.x_dtype, xo + e));
      continue;
    }
    std::int64_t pos = i;
    if (p.positions == core::RotaryPositions::offsets) {
      pos = p.offsets[b * p.offsets_stride] + i;
    } else if (p.positions == core::RotaryPositions::ids) {
      pos =
          p.packed ? p.ids[r * p.ids_stride[0]] : p.ids[b * p.ids_stride[0] + i * p.ids_stride[1]];
    }
    std::int64_t e1 = 0, e2 = 0;
    core::rotary_pair(j, p.half, p.interleaved, e1, e2);
    float y1 = NAN, y2 = NAN;
    if (pos >= 0 && pos < p.max_positions) {
      const float c =
          load_as_float(p.cos, p.cos_dtype, pos * p.cos_stride[0] + j * p.cos_stride[1]);
      const float s =
          load_as_float(p.sin, p.sin_dtype, pos * p.sin_stride[0] + j * p.sin_stride[1]);
      core::rotate_pair(load_as_float(p.x, p.x_dtype, xo + e1),
                        load_as_float(p.x, p.x_dtype, xo + e2), c, s, p.conjugate, y1, y2);
    }
    store_from_float(p.out, p.out_dtype, oo + e1, y1);
    store_from_float(p.out, p.out_dtype, oo + e2, y2);
  }
}

}  // namespace

void apply_rotary(const RotaryArgs& a, const core::RotaryDims& d) {
  current_device_capability("x", a.x.device());
  RotaryParams p{};
  p.x = a.x.data();
  p.out = a.out.data();
  p.cos = a.cos.data();
  p.sin = a.sin.data();
  p.x_layout = core::token_layout(a.x, d.packed);
  p.out_layout = core::token_layout(a.out, d.packed);
  for (int i = 0; i < 2; ++i) {
    p.cos_stride[i] = a.cos.stride(i);
    p.sin_stride[i] = a.sin.stride(i);
  }
  if (d.packed) {
    p.cu_seqlens = a.cu_seqlens.data_as<const std::int32_t>();
    p.cu_stride = a.cu_seqlens.stride(0);
  }
  if (d.positions == core::RotaryPositions::offsets) {
    p.offsets = a.seqlen_offsets.data_as<const std::int32_t>();
    p.offsets_stride = a.seqlen_offsets.stride(0);
  } else if (d.positions == core::RotaryPositions::ids) {
    p.ids = a.position_ids.data_as<const std::int32_t>();
    p.ids_stride[0] = a.position_ids.stride(0);
    p.ids_stride[1] = d.packed ? 0 : a.position_ids.stride(1);
  }
  p.batch = d.batch;
  p.rows = d.packed ? d.seqlen : d.batch * d.seqlen;
  p.heads = d.heads;
  p.head_dim = d.head_dim;
  p.half = d.rotary_dim / 2;
  p.max_positions = d.max_positions;
  p.x_dtype = a.x.dtype();
  p.out_dtype = a.out.dtype();
  p.cos_dtype = a.cos.dtype();
  p.sin_dtype = a.sin.dtype();
  p.positions = d.positions;
  p.packed = d.packed;
  p.interleaved = a.interleaved;
  p.conjugate = a.conjugate;
  const std::int64_t items = p.rows * p.heads * (p.head_dim - p.half);
  if (items == 0 || p.batch == 0) return;
  constexpr int kThreads = 256;
  // Enough blocks to fill any GPU several times over; the grid-stride loop covers the rest.
  const std::int64_t blocks = (items + kThreads - 1) / kThreads;
  rotary_kernel<<<unsigned(blocks < 16384 ? blocks : 16384), kThreads, 0,
                  static_cast<cudaStream_t>(a.stream)>>>(p);
  check_launch("rotary kernel");
}

}  // namespace flashkit::cuda
