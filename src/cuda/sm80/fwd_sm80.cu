#include "cuda/sm80/fwd_sm80.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/validate.hpp"
#include "cuda/common/device.hpp"
#include "cuda/sm80/paged_kv_params.hpp"

namespace flashkit::cuda::sm80 {

// fwd_kernel.cuh, instanced per head dim; smem_limit picks the tile shape.
template <class Elem, int kHeadDim>
void launch_fwd(const FwdParams& p, int smem_limit, cudaStream_t stream);
template <class Elem, int kHeadDim>
void launch_fwd_paged(const FwdParams& p, const PagedKvParams& kv, int smem_limit,
                      cudaStream_t stream);

namespace {

// The compiled variant matrix, generated from FLASHKIT_SM80_FWD_HEAD_DIMS.
constexpr int kHeadDims[] = {
#define FLASHKIT_SM80_FWD_HEAD_DIM(d) d,
#include "cuda/sm80/fwd_head_dims.inc"
#undef FLASHKIT_SM80_FWD_HEAD_DIM
};
constexpr int kPagedHeadDims[] = {
#define FLASHKIT_SM80_FWD_PAGED_HEAD_DIM(d) d,
#include "cuda/sm80/fwd_paged_head_dims.inc"
#undef FLASHKIT_SM80_FWD_PAGED_HEAD_DIM
};

template <std::size_t N>
bool in_list(const int (&list)[N], int head_dim) {
  for (int d : list) {
    if (d == head_dim) return true;
  }
  return false;
}

template <std::size_t N>
std::string list_text(const int (&list)[N]) {
  std::string s;
  for (int d : list) s += (s.empty() ? "{" : ", ") + std::to_string(d);
  return s + "}";
}

}  // namespace

bool fwd_has_head_dim(int head_dim) {
  return in_list(kHeadDims, head_dim);
}

std::string fwd_head_dims_text() {
  return list_text(kHeadDims);
}

bool fwd_paged_has_head_dim(int head_dim) {
  return in_list(kPagedHeadDims, head_dim);
}

std::string fwd_paged_head_dims_text() {
  return list_text(kPagedHeadDims);
}

void fwd(const FwdParams& p, cudaStream_t stream) {
  const int smem_limit = tile_smem_limit();  // before any launch: it can refuse its setting
  const bool f16 = p.in_dtype == DType::f16;
  switch (p.head_dim) {
#define FLASHKIT_SM80_FWD_HEAD_DIM(d)                         \
  case d:                                                     \
    return f16 ? launch_fwd<__half, d>(p, smem_limit, stream) \
               : launch_fwd<__nv_bfloat16, d>(p, smem_limit, stream);
#include "cuda/sm80/fwd_head_dims.inc"
#undef FLASHKIT_SM80_FWD_HEAD_DIM
    default:
      break;
  }
  core::fail("q.shape[-1]", "a head dim in " + fwd_head_dims_text() + " for the sm80 forward",
             std::to_string(p.head_dim));
}

void fwd_paged(const FwdParams& p, const PagedKvParams& kv, cudaStream_t stream) {
  const int smem_limit = tile_smem_limit();
  const bool f16 = p.in_dtype == DType::f16;
  switch (p.head_dim) {
#define FLASHKIT_SM80_FWD_PAGED_HEAD_DIM(d)                             \
  case d:                                                               \
    return f16 ? launch_fwd_paged<__half, d>(p, kv, smem_limit, stream) \
               : launch_fwd_paged<__nv_bfloat16, d>(p, kv, smem_limit, stream);
#include "cuda/sm80/fwd_paged_head_dims.inc"
#undef FLASHKIT_SM80_FWD_PAGED_HEAD_DIM
    default:
      break;
  }
  core::fail("q.shape[-1]",
             "a head dim in " + fwd_paged_head_dims_text() + " for the sm80 paged forward",
             std::to_string(p.head_dim));
}

}  // namespace flashkit::cuda::sm80
