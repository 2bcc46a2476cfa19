// D = rowsum(dO * O) per query row: the softmax backward's correction term, read by both
// gradient kernels. One warp per row.
#include <cstdint>

#include "cuda/bwd/bwd_kernels.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/dtype.cuh"
#include "cuda/ptx/warp_reduce.cuh"

namespace flashkit::cuda {

namespace {

__global__ void bwd_dot(BwdParams bp) {
  const FwdParams& p = bp.f;
  const std::int64_t row = std::int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= std::int64_t(p.batch) * p.heads_q * p.seqlen_q) return;
  const std::int64_t bh = row / p.seqlen_q, i = row % p.seqlen_q;
  const int b = int(bh / p.heads_q), h = int(bh % p.heads_q);
  const core::SeqSpan sp = sequence_span(p, b);
  if (i >= sp.len_q) return;
  const std::int64_t o0 = core::element_offset(p.out_layout, b, sp.q_start, i, h);
  const std::int64_t g0 = core::element_offset(bp.dout_layout, b, sp.q_start, i, h);
  float acc = 0.0f;
  for (int e = lane; e < p.head_dim_v; e += 32) {
    acc += load_as_float(p.out, p.out_dtype, o0 + e) * load_as_float(bp.dout, p.in_dtype, g0 + e);
  }
  acc = ptx::warp_sum(acc);
  if (lane == 0) bp.d_rows[row] = acc;
}

}  // namespace

void launch_bwd_dot(const BwdParams& p, cudaStream_t stream) {
  const std::int64_t rows = std::int64_t(p.f.batch) * p.f.heads_q * p.f.seqlen_q;
  constexpr int kRowsPerCta = 8;
  bwd_dot<<<unsigned((rows + kRowsPerCta - 1) / kRowsPerCta), 32 * kRowsPerCta, 0, stream>>>(p);
  check_launch("backward D = rowsum(dO * O)");
}

}  // namespace flashkit::cuda
