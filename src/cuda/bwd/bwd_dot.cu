// D = rowsum(dO * O) per query row: the softmax backward's correction term, read by both
// gradient kernels. When the tensor-core path passes its fp32 dQ accumulator, the same pass zeroes
// that row of it (one streaming pass instead of a separate memset of 4 * heads * d bytes a token).
//
// Two kernels: 16-byte loads by a group of d / 8 lanes per row when O and dO are 16-bit rows that
// allow it (the training case), one warp per row with scalar loads otherwise (f32, odd head dims,
// unaligned rows). The scalar kernel moved 134 MB in 141 us at d = 128 (0.95 TB/s); a lane with
// one 2-byte load of each tensor in flight cannot cover DRAM latency.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/bwd/bwd_kernels.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/dtype.cuh"
#include "cuda/ptx/warp_reduce.cuh"

namespace flashkit::cuda {

namespace {

// Zeroes the dQ accumulator's floats of query i of (b, h) with `lanes` lanes starting at `lane`:
// d / 8 runs of 8 floats (bwd_params.hpp), each two 16-byte stores.
__device__ __forceinline__ void zero_accum_row(const BwdParams& bp, int b, const core::SeqSpan& sp,
                                               std::int64_t i, int h, int lane, int lanes) {
  float* const row = bp.dq_accum + dq_accum_offset(bp, b, sp, i, h, 0);
  for (int e = 4 * lane; e < bp.f.head_dim; e += 4 * lanes) {
    *reinterpret_cast<float4*>(row + (e / 8) * 64 + e % 8) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
}

// Two 16-bit values packed in one register (low half first) as floats.
template <class Elem>
__device__ __forceinline__ float2 unpack2(std::uint32_t v) {
  if constexpr (std::is_same_v<Elem, __half>) {
    return __half22float2(*reinterpret_cast<const __half2*>(&v));
  } else {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v));
  }
}

template <class Elem>
__device__ __forceinline__ float dot8(uint4 a, uint4 b) {
  const std::uint32_t av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
  float acc = 0.0f;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 x = unpack2<Elem>(av[k]), y = unpack2<Elem>(bv[k]);
    acc = fmaf(x.x, y.x, fmaf(x.y, y.y, acc));
  }
  return acc;
}

// kLanes (a power of two, d_v <= 8 * kLanes) lanes per row, 32 / kLanes rows per warp.
template <class Elem, int kLanes>
__global__ void bwd_dot_vec(BwdParams bp) {
  const FwdParams& p = bp.f;
  const std::int64_t row = (std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kLanes;
  const int lane = int(threadIdx.x % kLanes);
  float acc = 0.0f;
  int b = 0, h = 0;
  std::int64_t i = 0;
  core::SeqSpan sp{};
  const bool live =
      row < std::int64_t(p.batch) * p.heads_q * p.seqlen_q && query_row(p, row, b, h, i, sp);
  if (live) {
    const Elem* o =
        static_cast<const Elem*>(p.out) + core::element_offset(p.out_layout, b, sp.q_start, i, h);
    const Elem* g = static_cast<const Elem*>(bp.dout) +
                    core::element_offset(bp.dout_layout, b, sp.q_start, i, h);
    for (int e = 8 * lane; e < p.head_dim_v; e += 8 * kLanes) {
      acc += dot8<Elem>(*reinterpret_cast<const uint4*>(o + e),
                        *reinterpret_cast<const uint4*>(g + e));
    }
    if (bp.dq_accum != nullptr) zero_accum_row(bp, b, sp, i, h, lane, kLanes);
  }
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset /= 2) {
    acc += __shfl_xor_sync(0xffffffffu, acc, offset);
  }
  if (live && lane == 0) bp.d_rows[row] = acc;
}

__global__ void bwd_dot_scalar(BwdParams bp) {
  const FwdParams& p = bp.f;
  const std::int64_t row = std::int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= std::int64_t(p.batch) * p.heads_q * p.seqlen_q) return;
  int b = 0, h = 0;
  std::int64_t i = 0;
  core::SeqSpan sp{};
  if (!query_row(p, row, b, h, i, sp)) return;
  const std::int64_t o0 = core::element_offset(p.out_layout, b, sp.q_start, i, h);
  const std::int64_t g0 = core::element_offset(bp.dout_layout, b, sp.q_start, i, h);
  float acc = 0.0f;
  for (int e = lane; e < p.head_dim_v; e += 32) {
    acc += load_as_float(p.out, p.out_dtype, o0 + e) * load_as_float(bp.dout, p.in_dtype, g0 + e);
  }
  if (bp.dq_accum != nullptr) zero_accum_row(bp, b, sp, i, h, lane, 32);
  acc = ptx::warp_sum(acc);
  if (lane == 0) bp.d_rows[row] = acc;
}

// Every row of a [.., tokens, heads, d] tensor starts on 16 bytes (8 16-bit elements).
bool rows_16_byte_aligned(const void* data, const core::TokenLayout& lay) {
  return reinterpret_cast<std::uintptr_t>(data) % 16 == 0 && lay.batch_stride % 8 == 0 &&
         lay.token_stride % 8 == 0 && lay.head_stride % 8 == 0;
}

template <class Elem>
void launch_vec(const BwdParams& p, std::int64_t rows, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const int d = p.f.head_dim_v;
  auto launch = [&](auto kernel, int lanes) {
    const std::int64_t threads = rows * lanes;
    kernel<<<unsigned((threads + kThreads - 1) / kThreads), kThreads, 0, stream>>>(p);
  };
  if (d <= 64) {
    launch(bwd_dot_vec<Elem, 8>, 8);
  } else if (d <= 128) {
    launch(bwd_dot_vec<Elem, 16>, 16);
  } else {
    launch(bwd_dot_vec<Elem, 32>, 32);
  }
}

}  // namespace

void launch_bwd_dot(const BwdParams& p, cudaStream_t stream) {
  const std::int64_t rows = std::int64_t(p.f.batch) * p.f.heads_q * p.f.seqlen_q;
  const DType dtype = p.f.in_dtype;
  const bool vec = (dtype == DType::f16 || dtype == DType::bf16) && p.f.out_dtype == dtype &&
                   p.f.head_dim_v % 8 == 0 && rows_16_byte_aligned(p.f.out, p.f.out_layout) &&
                   rows_16_byte_aligned(p.dout, p.dout_layout);
  if (vec && dtype == DType::bf16) {
    launch_vec<__nv_bfloat16>(p, rows, stream);
  } else if (vec) {
    launch_vec<__half>(p, rows, stream);
  } else {
    constexpr int kRowsPerCta = 8;
    bwd_dot_scalar<<<unsigned((rows + kRowsPerCta - 1) / kRowsPerCta), 32 * kRowsPerCta, 0,
                     stream>>>(p);
  }
  check_launch("backward D = rowsum(dO * O)");
}

}  // namespace flashkit::cuda
