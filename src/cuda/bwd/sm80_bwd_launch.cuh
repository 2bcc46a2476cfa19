// The gradient kernels of one (dtype, head dim): dK/dV (and dQ through the fp32 accumulator when
// p.dq_accum is set), else dK/dV then the deterministic dQ kernel. Head dims whose dK/dV tile
// grows with shared memory get a second kernel, run where a CTA may have 227 KB (smem_limit:
// tile_smem_limit() in common/device.hpp). Included only by the generated instance files
// (sm80_bwd_instance.cu.in).
#pragma once

#include <cuda_runtime.h>

#include "cuda/bwd/bwd_params.hpp"
#include "cuda/bwd/sm80_bwd_tile_shape.hpp"
#include "cuda/bwd/sm80_dkdv_kernel.cuh"
#include "cuda/bwd/sm80_dq_kernel.cuh"

namespace flashkit::cuda::sm80 {

template <class Elem, int kHeadDim>
void launch_bwd(const BwdParams& p, int smem_limit, cudaStream_t stream) {
  if constexpr (bwd_shape_grows_with_smem(kHeadDim)) {
    if (smem_limit >= kSm90SmemLimit) {
      launch_dkdv<BwdTraits<Elem, kHeadDim, kSm90SmemLimit>>(p, stream);
    } else {
      launch_dkdv<BwdTraits<Elem, kHeadDim>>(p, stream);
    }
  } else {
    launch_dkdv<BwdTraits<Elem, kHeadDim>>(p, stream);
  }
  if (p.dq_accum == nullptr) launch_dq<DqTraits<Elem, kHeadDim>>(p, stream);
}

}  // namespace flashkit::cuda::sm80
