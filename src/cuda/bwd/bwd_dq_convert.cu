// dQ from the tensor-core backward's fp32 accumulator into the caller's dq (its dtype and
// strides); memory-bound (6 bytes per element at bf16). A thread converts 8 elements with two
// 16-byte loads and one 16-byte store when dq is 16-bit with 16-byte rows; otherwise a pair with
// scalar stores (f32 gradients, odd head dims, unaligned rows). The pair kernel ran at 1.5 TB/s
// at d = 128 (130 us for 201 MB).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/bwd/bwd_kernels.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/dtype.cuh"
#include "cuda/ptx/convert.cuh"

namespace flashkit::cuda {

namespace {

// What thread x converts, kPer elements from element e of its row: the accumulator's floats and
// the element offset in dq; false past the rows or past the row's sequence.
template <int kPer>
__device__ __forceinline__ bool convert_site(const BwdParams& bp, std::int64_t x, const float*& src,
                                             std::int64_t& dst) {
  const FwdParams& p = bp.f;
  const int per_row = p.head_dim / kPer;
  const std::int64_t row = x / per_row;
  int b = 0, h = 0;
  std::int64_t i = 0;
  core::SeqSpan sp{};
  if (row >= std::int64_t(p.batch) * p.heads_q * p.seqlen_q || !query_row(p, row, b, h, i, sp)) {
    return false;
  }
  const int e = int(x % per_row) * kPer;
  src = bp.dq_accum + dq_accum_offset(bp, b, sp, i, h, e);
  dst = core::element_offset(bp.dq_layout, b, sp.q_start, i, h) + e;
  return true;
}

template <class Elem>
__global__ void bwd_dq_convert_vec(BwdParams bp) {
  const float* src = nullptr;
  std::int64_t dst = 0;
  if (!convert_site<8>(bp, std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x, src, dst)) return;
  const float4 lo = reinterpret_cast<const float4*>(src)[0];
  const float4 hi = reinterpret_cast<const float4*>(src)[1];
  const uint4 out{ptx::pack2<Elem>(lo.x, lo.y), ptx::pack2<Elem>(lo.z, lo.w),
                  ptx::pack2<Elem>(hi.x, hi.y), ptx::pack2<Elem>(hi.z, hi.w)};
  *reinterpret_cast<uint4*>(static_cast<Elem*>(bp.dq) + dst) = out;
}

__global__ void bwd_dq_convert_pairs(BwdParams bp) {
  const float* src = nullptr;
  std::int64_t dst = 0;
  if (!convert_site<2>(bp, std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x, src, dst)) return;
  store_from_float(bp.dq, bp.dq_dtype, dst, src[0]);
  store_from_float(bp.dq, bp.dq_dtype, dst + 1, src[1]);
}

}  // namespace

void launch_bwd_dq_convert(const BwdParams& p, cudaStream_t stream) {
  const std::int64_t elements = std::int64_t(p.f.batch) * p.f.heads_q * p.f.seqlen_q * p.f.head_dim;
  if (elements == 0) return;
  const core::TokenLayout& lay = p.dq_layout;
  const bool vec = (p.dq_dtype == DType::f16 || p.dq_dtype == DType::bf16) &&
                   p.f.head_dim % 8 == 0 && reinterpret_cast<std::uintptr_t>(p.dq) % 16 == 0 &&
                   lay.batch_stride % 8 == 0 && lay.token_stride % 8 == 0 &&
                   lay.head_stride % 8 == 0;
  constexpr int kBlock = 256;
  const std::int64_t threads = elements / (vec ? 8 : 2);
  const unsigned grid = unsigned((threads + kBlock - 1) / kBlock);
  if (vec && p.dq_dtype == DType::bf16) {
    bwd_dq_convert_vec<__nv_bfloat16><<<grid, kBlock, 0, stream>>>(p);
  } else if (vec) {
    bwd_dq_convert_vec<__half><<<grid, kBlock, 0, stream>>>(p);
  } else {
    bwd_dq_convert_pairs<<<grid, kBlock, 0, stream>>>(p);
  }
  check_launch("backward dQ conversion");
}

}  // namespace flashkit::cuda
