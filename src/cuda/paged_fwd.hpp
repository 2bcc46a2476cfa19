// Paged attention on tensor cores: the sm80 forward (sm80/kv_source.cuh) or, on compute
// capability 9.0, the sm90 one (sm90/fwd_kv_source.cuh) reading K/V from cache pages through the
// block table. It serves the calls with many query rows per KV head, where
// the decode kernels (CUDA cores) are compute-bound: cascade's shared level (every request's
// queries against one prefix) and chunked prefill. Plain C++ (no CUDA headers), so core code can
// include it. No allocation and no host synchronisation: capturable in a CUDA graph.
#pragma once

#include <cstdint>
#include <string>

#include "core/paged_problem.hpp"
#include "flashkit/paged.hpp"

namespace flashkit::cuda {

// How the call runs (sm80/kv_source.cuh):
//  - key splits of one cache sequence: kernel sequence s reads keys [s * split_keys, (s + 1) *
//    split_keys) and writes its partial out / lse (f32) s * out_stride / s * lse_stride elements
//    after the call's out / lse. key_splits == 1: the call as it stands.
//  - pack_gqa: a GQA group's query heads share the rows of one tile (for masks that ignore query
//    positions).
enum class PagedFwdKernel {
  automatic,  // sm90 where it runs the call, else sm80
  sm80,
  sm90,
};

struct PagedFwdOptions {
  int key_splits = 1;
  int split_keys = 0;  // a multiple of 64 when key_splits > 1
  std::int64_t out_stride = 0, lse_stride = 0;
  bool pack_gqa = false;
  PagedFwdKernel kernel = PagedFwdKernel::automatic;
  // A cudaEvent_t (timing disabled) the launch records once every CTA has begun (a launch
  // completion event; stream_wait.hpp's started_event), or nullptr.
  void* started = nullptr;
};

// "" when paged_fwd can run this validated call, else why not: the current device sm80+, q and
// pages both f16 or both bf16, head dim in FLASHKIT_SM80_FWD_PAGED_HEAD_DIMS with d_v = d, out
// q's dtype or f32, 16-byte aligned rows, queries not packed, no ALiBi; with key splits also one
// cache sequence; with key splits or GQA packing no causal, window or prefix-LM mask (key
// positions restart in each split, packed rows are not query positions). The sm90 kernel also
// needs a build with sm_90a, a compute capability 9.0 device, a head dim it was compiled for,
// heads of pages of <= 16 slots less than 2^31 elements apart (row copies) and, when packing, a
// GQA group dividing its tiles' query rows (128; 64 at d = 64).
std::string paged_fwd_unsupported(const PagedAttentionArgs& a, const core::PagedDims& d,
                                  const PagedFwdOptions& options = {});

// The kernel paged_fwd runs a call paged_fwd_unsupported accepts with: sm80 or sm90.
PagedFwdKernel paged_fwd_kernel(const PagedAttentionArgs& a, const core::PagedDims& d,
                                const PagedFwdOptions& options = {});

// Whether paged_attention runs this validated call here rather than on the decode kernels:
// algo automatic, more query rows per KV head than the decode kernels take faster, and a call
// paged_fwd runs.
bool paged_fwd_preferred(const PagedAttentionArgs& a, const core::PagedDims& d);

// Throws flashkit::Error (paged_fwd_unsupported's reason) when it cannot run the call.
void paged_fwd(const PagedAttentionArgs& a, const core::PagedDims& d,
               const PagedFwdOptions& options = {});

}  // namespace flashkit::cuda
