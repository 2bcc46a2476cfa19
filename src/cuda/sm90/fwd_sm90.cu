#include "cuda/sm90/fwd_sm90.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/mask_rules.hpp"
#include "core/validate.hpp"
#include "cuda/common/device.hpp"
#include "cuda/sm90/fwd_maps.hpp"
#include "cuda/sm90/fwd_tile_shape.hpp"

namespace flashkit::cuda::sm90 {

template <class Elem, int kHeadDim>
void launch_fwd(const FwdParams& p, const FwdMaps& maps, FwdShape shape, int multiprocessors,
                cudaStream_t stream);  // fwd_kernel.cuh

namespace {

constexpr int kHeadDims[] = {
#define FLASHKIT_SM90_FWD_HEAD_DIM(d) d,
#include "cuda/sm90/fwd_head_dims.inc"
#undef FLASHKIT_SM90_FWD_HEAD_DIM
};

}  // namespace

bool fwd_has_head_dim(int head_dim) {
  for (int d : kHeadDims) {
    if (d == head_dim) return true;
  }
  return false;
}

std::string fwd_head_dims_text() {
  std::string s;
  for (int d : kHeadDims) s += (s.empty() ? "{" : ", ") + std::to_string(d);
  return s + "}";
}

void fwd(const AttentionArgs& a, const core::ProblemDims& d, const FwdParams& p,
         cudaStream_t stream) {
  const bool f16 = p.in_dtype == DType::f16;
  const FwdShape shape =
      fwd_shape(p.head_dim, core::masks_anything(p.mask), p.seqlen_q, p.seqlen_k);
  const FwdMaps maps = make_fwd_maps(a, d, 64 * shape.consumers, shape.block_n);
  const int sms = multiprocessor_count(a.q.device());
  switch (p.head_dim) {
#define FLASHKIT_SM90_FWD_HEAD_DIM(hd)                               \
  case hd:                                                           \
    return f16 ? launch_fwd<__half, hd>(p, maps, shape, sms, stream) \
               : launch_fwd<__nv_bfloat16, hd>(p, maps, shape, sms, stream);
#include "cuda/sm90/fwd_head_dims.inc"
#undef FLASHKIT_SM90_FWD_HEAD_DIM
    default:
      break;
  }
  core::fail("q.shape[-1]", "a head dim in " + fwd_head_dims_text() + " for the sm90 forward",
             std::to_string(p.head_dim));
}

}  // namespace flashkit::cuda::sm90
