// dQ from the tensor-core backward's fp32 accumulator into the caller's dq (its dtype and
// strides). One thread per pair of elements; memory-bound (6 bytes per element at bf16).
#include <cstdint>

#include "cuda/bwd/bwd_kernels.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/dtype.cuh"

namespace flashkit::cuda {

namespace {

__global__ void bwd_dq_convert(BwdParams bp) {
  const FwdParams& p = bp.f;
  const int pairs = p.head_dim / 2;
  const std::int64_t x = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t row = x / pairs;
  if (row >= std::int64_t(p.batch) * p.heads_q * p.seqlen_q) return;
  const int e = int(x % pairs) * 2;
  const std::int64_t bh = row / p.seqlen_q, i = row % p.seqlen_q;
  const int b = int(bh / p.heads_q), h = int(bh % p.heads_q);
  const core::SeqSpan sp = sequence_span(p, b);
  if (i >= sp.len_q) return;
  const float2 v =
      *reinterpret_cast<const float2*>(bp.dq_accum + dq_accum_row(bp, b, sp, i, h) + e);
  const std::int64_t off = core::element_offset(bp.dq_layout, b, sp.q_start, i, h) + e;
  store_from_float(bp.dq, bp.dq_dtype, off, v.x);
  store_from_float(bp.dq, bp.dq_dtype, off + 1, v.y);
}

}  // namespace

void launch_bwd_dq_convert(const BwdParams& p, cudaStream_t stream) {
  const std::int64_t threads =
      std::int64_t(p.f.batch) * p.f.heads_q * p.f.seqlen_q * (p.f.head_dim / 2);
  if (threads == 0) return;
  constexpr int kBlock = 256;
  bwd_dq_convert<<<unsigned((threads + kBlock - 1) / kBlock), kBlock, 0, stream>>>(p);
  check_launch("backward dQ conversion");
}

}  // namespace flashkit::cuda
