// append_kv on CUDA: new tokens' K and V rows into their pages. One thread per element (an
// append is batch * n_new * kv_heads * d elements per tensor, 256K for a batch-128 decode step:
// a few microseconds, so no vectorising); f32 / f16 / bf16 pages take the value rounded to
// nearest even, e4m3 pages take value / scale (IEEE division) rounded by fp8_codec.cuh's encoder.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "core/problem.hpp"
#include "core/validate.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/device.hpp"
#include "cuda/common/dtype.cuh"
#include "cuda/decode/decode_backend.hpp"
#include "cuda/decode/decode_params.hpp"
#include "cuda/decode/fp8_codec.cuh"

namespace flashkit::cuda {

namespace {

// One of k / v: where the new rows come from and where they go.
struct AppendSide {
  const void* src;
  core::TokenLayout src_layout;  // [batch, n_new, kv_heads, d]
  void* pages;
  PageStrides page_strides;
  const float* scale;  // e4m3 pages only
  std::int64_t scale_page, scale_head;
};

struct AppendParams {
  AppendSide side[2];  // k, v
  const std::int32_t* block_table;
  std::int64_t table_batch, table_page;
  const std::int32_t* start_pos;
  std::int64_t start_stride;
  std::int64_t batch, new_tokens, heads_kv, head_dim;
  int page_shift;
  DType src_dtype, page_dtype;
};

__global__ void append_kv_kernel(const __grid_constant__ AppendParams p) {
  const std::int64_t per_side = p.batch * p.new_tokens * p.heads_kv * p.head_dim;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < 2 * per_side;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const AppendSide& s = p.side[i >= per_side ? 1 : 0];
    std::int64_t rest = i % per_side;
    const std::int64_t e = rest % p.head_dim;
    rest /= p.head_dim;
    const std::int64_t h = rest % p.heads_kv;
    rest /= p.heads_kv;
    const std::int64_t t = rest % p.new_tokens, b = rest / p.new_tokens;

    const std::int64_t pos = p.start_pos[b * p.start_stride] + t;
    const std::int64_t page =
        p.block_table[b * p.table_batch + (pos >> p.page_shift) * p.table_page];
    const std::int64_t slot = pos & ((std::int64_t(1) << p.page_shift) - 1);
    const float x =
        load_as_float(s.src, p.src_dtype, core::element_offset(s.src_layout, b, 0, t, h) + e);
    const std::int64_t at =
        page * s.page_strides.page + slot * s.page_strides.slot + h * s.page_strides.head + e;
    if (p.page_dtype == DType::e4m3) {
      static_cast<std::uint8_t*>(s.pages)[at] =
          decode::float_to_e4m3(x / s.scale[page * s.scale_page + h * s.scale_head]);
    } else {
      store_from_float(s.pages, p.page_dtype, at, x);
    }
  }
}

AppendSide side_of(const Tensor& src, const Tensor& pages, const Tensor& scale) {
  AppendSide s{};
  s.src = src.data();
  s.src_layout = core::token_layout(src, false);
  s.pages = pages.data();
  s.page_strides = {pages.stride(0), pages.stride(1), pages.stride(2)};
  if (scale.defined()) {
    s.scale = scale.data_as<const float>();
    s.scale_page = scale.stride(0);
    s.scale_head = scale.stride(1);
  }
  return s;
}

}  // namespace

void append_kv(const AppendKVArgs& args, const core::AppendDims& dims) {
  current_device_capability("k_new", args.k_new.device());
  if (dims.head_dim_v != dims.head_dim) {  // one element index walks both sides
    core::fail("v_new.shape[3]", std::to_string(dims.head_dim) + " (the head dim of k_new) on cuda",
               std::to_string(dims.head_dim_v));
  }
  const PagedKV& kv = args.kv;
  AppendParams p{};
  p.side[0] = side_of(args.k_new, kv.k_pages, dims.fp8_kv ? kv.k_scale : Tensor());
  p.side[1] = side_of(args.v_new, kv.v_pages, dims.fp8_kv ? kv.v_scale : Tensor());
  p.block_table = kv.block_table.data_as<const std::int32_t>();
  p.table_batch = kv.block_table.stride(0);
  p.table_page = kv.block_table.stride(1);
  p.start_pos = args.start_pos.data_as<const std::int32_t>();
  p.start_stride = args.start_pos.stride(0);
  p.batch = dims.batch;
  p.new_tokens = dims.new_tokens;
  p.heads_kv = dims.heads_kv;
  p.head_dim = dims.head_dim;
  while ((std::int64_t(1) << p.page_shift) < dims.page_size) ++p.page_shift;
  p.src_dtype = args.k_new.dtype();
  p.page_dtype = kv.k_pages.dtype();
  const std::int64_t elems = 2 * dims.batch * dims.new_tokens * dims.heads_kv * dims.head_dim;
  if (elems == 0) return;
  constexpr int kThreads = 256;
  // Enough blocks for every SM several times over; the loop strides past that.
  const std::int64_t blocks = (elems + kThreads - 1) / kThreads;
  append_kv_kernel<<<unsigned(blocks < 8192 ? blocks : 8192), kThreads, 0,
                     static_cast<cudaStream_t>(args.stream)>>>(p);
  check_launch("append_kv kernel");
}

}  // namespace flashkit::cuda
