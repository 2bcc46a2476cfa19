#include "cuda/bwd/sm80_bwd.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <string>

#include "core/validate.hpp"
#include "cuda/bwd/bwd_kernels.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/device.hpp"
#include "cuda/common/stream_buffer.hpp"

namespace flashkit::cuda::sm80 {

template <class Elem, int kHeadDim>
void launch_bwd(const BwdParams& p, int smem_limit,
                cudaStream_t stream);  // sm80_bwd_launch.cuh, per head dim

namespace {

// The compiled variant matrix, generated from FLASHKIT_SM80_BWD_HEAD_DIMS.
constexpr int kHeadDims[] = {
#define FLASHKIT_SM80_BWD_HEAD_DIM(d) d,
#include "cuda/bwd/sm80_bwd_head_dims.inc"
#undef FLASHKIT_SM80_BWD_HEAD_DIM
};

void launch_for_head_dim(const BwdParams& p, int smem_limit, cudaStream_t stream) {
  const bool f16 = p.f.in_dtype == DType::f16;
  switch (p.f.head_dim) {
#define FLASHKIT_SM80_BWD_HEAD_DIM(d)                         \
  case d:                                                     \
    return f16 ? launch_bwd<__half, d>(p, smem_limit, stream) \
               : launch_bwd<__nv_bfloat16, d>(p, smem_limit, stream);
#include "cuda/bwd/sm80_bwd_head_dims.inc"
#undef FLASHKIT_SM80_BWD_HEAD_DIM
    default:
      break;
  }
  core::fail("q.shape[-1]", "a head dim compiled into the sm80 backward",
             std::to_string(p.f.head_dim));
}

}  // namespace

bool bwd_has_head_dim(int head_dim) {
  for (int d : kHeadDims) {
    if (d == head_dim) return true;
  }
  return false;
}

void bwd(const BwdParams& params, bool deterministic, cudaStream_t stream) {
  const int smem_limit = tile_smem_limit();  // before any launch: it can refuse its setting
  const std::int64_t rows = std::int64_t(params.f.batch) * params.f.heads_q * params.f.seqlen_q;
  const std::int64_t accum = deterministic ? 0 : dq_accum_floats(params);
  StreamBuffer d_rows(std::size_t(rows) * sizeof(float), stream);
  StreamBuffer dq_accum(std::size_t(accum) * sizeof(float), stream);
  BwdParams p = params;
  p.d_rows = d_rows.as<float>();
  p.dq_accum = dq_accum.as<float>();
  // D, and the accumulator's rows zeroed in the same pass (every row the dK/dV kernel adds into
  // and the conversion reads is a (sequence, head, query) row of D).
  if (rows > 0) launch_bwd_dot(p, stream);
  launch_for_head_dim(p, smem_limit, stream);
  if (accum > 0) launch_bwd_dq_convert(p, stream);
}

}  // namespace flashkit::cuda::sm80
