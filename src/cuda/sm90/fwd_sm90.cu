#include "cuda/sm90/fwd_sm90.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>
#include <type_traits>

#include "core/mask_rules.hpp"
#include "core/validate.hpp"
#include "cuda/common/device.hpp"
#include "cuda/sm90/fwd_kv_source.cuh"
#include "cuda/sm90/fwd_maps.hpp"
#include "cuda/sm90/fwd_paged_rows.cuh"
#include "cuda/sm90/fwd_tile_shape.hpp"

namespace flashkit::cuda::sm90 {

template <class Elem, int kHeadDim>
void launch_fwd(const FwdParams& p, const FwdMaps& maps, FwdShape shape, int multiprocessors,
                cudaStream_t stream);  // fwd_kernel.cuh
template <class Elem, int kHeadDim, class Source>
void launch_fwd_paged(const FwdParams& p, const FwdMaps& maps, const Source& src,
                      cudaStream_t stream, cudaEvent_t started);  // fwd_kernel.cuh

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

namespace {

// launch(Elem{}, std::integral_constant<int, d>{}) for the call's dtype and head dim d, one of
// those compiled in.
template <class Launch>
void with_elem_and_head_dim(const FwdParams& p, const Launch& launch) {
  const bool f16 = p.in_dtype == DType::f16;
  switch (p.head_dim) {
#define FLASHKIT_SM90_FWD_HEAD_DIM(hd)                               \
  case hd:                                                           \
    return f16 ? launch(__half{}, std::integral_constant<int, hd>{}) \
               : launch(__nv_bfloat16{}, std::integral_constant<int, hd>{});
#include "cuda/sm90/fwd_head_dims.inc"
#undef FLASHKIT_SM90_FWD_HEAD_DIM
    default:
      break;
  }
  core::fail("q.shape[-1]", "a head dim in " + fwd_head_dims_text() + " for the sm90 forward",
             std::to_string(p.head_dim));
}

}  // namespace

void fwd(const AttentionArgs& a, const core::ProblemDims& d, const FwdParams& p,
         cudaStream_t stream) {
  const FwdShape shape =
      fwd_shape(p.head_dim, core::masks_anything(p.mask), p.seqlen_q, p.seqlen_k);
  const FwdMaps maps = make_fwd_maps(a, d, shape.block_m(), shape.block_n);
  const int sms = multiprocessor_count(a.q.device());
  with_elem_and_head_dim(p, [&](auto elem, auto head_dim) {
    launch_fwd<decltype(elem), decltype(head_dim)::value>(p, maps, shape, sms, stream);
  });
}

int fwd_paged_block_m(int head_dim) {
  return fwd_paged_shape(head_dim).block_m();
}

int fwd_paged_block_n(int head_dim) {
  return fwd_paged_shape(head_dim).block_n;
}

void fwd_paged(const PagedAttentionArgs& a, const FwdParams& p, const sm80::PagedKvParams& kv,
               int box_rows, cudaStream_t stream, cudaEvent_t started) {
  const FwdShape shape = fwd_paged_shape(p.head_dim);
  const bool store_out = p.out_dtype == p.in_dtype && kv.q_pack == 1 && kv.key_splits == 1;
  const FwdMaps maps = make_paged_fwd_maps(a, kv.q_pack, shape.block_m(), box_rows, store_out);
  with_elem_and_head_dim(p, [&](auto elem, auto head_dim) {
    using Elem = decltype(elem);
    constexpr int kHeadDim = decltype(head_dim)::value;
    if (box_rows == 0) {
      launch_fwd_paged<Elem, kHeadDim>(p, maps, PagedRowSource{{kv}}, stream, started);
    } else {
      launch_fwd_paged<Elem, kHeadDim>(
          p, maps, PagedSource{{kv}, box_rows, int(a.kv.k_pages.size(0))}, stream, started);
    }
  });
}

}  // namespace flashkit::cuda::sm90
