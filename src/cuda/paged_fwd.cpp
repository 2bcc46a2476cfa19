#include "cuda/paged_fwd.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <numeric>
#include <string>

#include "core/softmax_state.hpp"
#include "core/validate.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/device.hpp"
#include "cuda/common/fwd_params.hpp"
#include "cuda/sm80/fwd_sm80.hpp"
#include "cuda/sm80/paged_kv_params.hpp"
#include "flashkit/error.hpp"

#if FLASHKIT_HAVE_SM90
#include "cuda/sm90/fwd_sm90.hpp"
#endif

namespace flashkit::cuda {

namespace {

bool rows_16_byte_aligned(const Tensor& t) {
  if (reinterpret_cast<std::uintptr_t>(t.data()) % 16 != 0) return false;
  const std::int64_t elems = 16 / std::int64_t(dtype_size(t.dtype()));
  for (int i = 0; i + 1 < t.rank(); ++i) {
    if (t.stride(i) % elems != 0) return false;
  }
  return true;
}

int log2_exact(std::int64_t pow2) {
  int s = 0;
  while ((std::int64_t(1) << s) < pow2) ++s;
  return s;
}

FwdParams fwd_params(const PagedAttentionArgs& a, const core::PagedDims& d,
                     const PagedFwdOptions& o) {
  FwdParams p{};
  p.q = a.q.data();
  p.out = a.out.data();
  p.lse = a.lse.defined() ? a.lse.data_as<float>() : nullptr;
  p.q_layout = core::token_layout(a.q, false);
  p.out_layout = core::token_layout(a.out, false);
  if (p.lse != nullptr) p.lse_layout = core::lse_layout(a.lse, false);
  if (o.key_splits > 1) {  // one cache sequence: every split reads the same queries
    p.q_layout.batch_stride = 0;
    p.out_layout.batch_stride = o.out_stride;
    p.lse_layout.batch_stride = o.lse_stride;
  }
  // Packed: one kernel head per KV head, q_len * group rows (kv_source.cuh).
  const std::int64_t pack = o.pack_gqa ? d.group() : 1;
  p.batch = int(d.batch) * o.key_splits;
  p.heads_q = int(d.heads_q / pack);
  p.heads_kv = int(d.heads_kv);
  p.seqlen_q = int(d.q_len * pack);
  p.seqlen_k = o.key_splits > 1 ? o.split_keys : int(d.max_pages * d.page_size);
  p.head_dim = int(d.head_dim);
  p.head_dim_v = int(d.head_dim_v);
  p.scale = float(d.scale);
  p.scale_log2 = float(d.scale * core::kLog2e);
  p.mask = d.mask;
  p.in_dtype = a.q.dtype();
  p.out_dtype = a.out.dtype();
  return p;
}

sm80::PagedKvParams kv_params(const PagedAttentionArgs& a, const core::PagedDims& d,
                              const PagedFwdOptions& o) {
  const PagedKV& kv = a.kv;
  sm80::PagedKvParams p{};
  p.k_pages = kv.k_pages.data();
  p.v_pages = kv.v_pages.data();
  p.k_page_stride = kv.k_pages.stride(0);
  p.k_slot_stride = kv.k_pages.stride(1);
  p.k_head_stride = kv.k_pages.stride(2);
  p.v_page_stride = kv.v_pages.stride(0);
  p.v_slot_stride = kv.v_pages.stride(1);
  p.v_head_stride = kv.v_pages.stride(2);
  p.block_table = kv.block_table.data_as<const std::int32_t>();
  p.table_batch = kv.block_table.stride(0);
  p.table_page = kv.block_table.stride(1);
  p.seq_lens = kv.seq_lens.data_as<const std::int32_t>();
  p.seq_lens_stride = kv.seq_lens.stride(0);
  p.page_shift = log2_exact(d.page_size);
  p.key_splits = o.key_splits;
  p.split_keys = o.split_keys;
  p.q_pack = o.pack_gqa ? int(d.group()) : 1;
  return p;
}

// Compute capability as 10 * major + minor of q's device, or -1 when q is not on the current
// CUDA device.
int capability_of(const Tensor& q) {
  int device = -1, major = 0, minor = 0;
  if (q.device().is_cpu() || cudaGetDevice(&device) != cudaSuccess || device != q.device().index ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return 10 * major + minor;
}

// What the sm90 kernel needs beyond what both take; "" when it runs the call.
// Pages up to which the sm90 kernel copies K and V row by row with cp.async rather than in TMA
// boxes of one page (H200, paged prefill over 4096 cached tokens, d 128, per 128-key block:
// pages of 16 boxes 3.3 us, rows 2.9; pages of 64 boxes 1.9 us, rows 2.9; of 256 boxes 1.85;
// docs/kernels/cascade.md, v7).
constexpr std::int64_t kSm90RowCopyMaxPage = 16;

std::string sm90_unsupported(const PagedAttentionArgs& a, const core::PagedDims& d,
                             const PagedFwdOptions& o, int capability) {
#if FLASHKIT_HAVE_SM90
  if (capability != 90) return "the sm90 kernel on a device of compute capability != 9.0";
  if (!sm90::fwd_has_head_dim(int(d.head_dim))) {
    return "head dim not in " + sm90::fwd_head_dims_text() + " for the sm90 kernel";
  }
  const int tile_rows = sm90::fwd_paged_block_m(int(d.head_dim));
  if (o.pack_gqa && tile_rows % d.group() != 0) {
    return "a GQA group not dividing the sm90 kernel's " + std::to_string(tile_rows) + "-row tiles";
  }
  // The row copies (sm90/fwd_paged_rows.cuh) offset a head's rows in 32-bit arithmetic.
  if (d.page_size <= kSm90RowCopyMaxPage) {
    for (const Tensor* t : {&a.kv.k_pages, &a.kv.v_pages}) {
      if ((t->size(2) - 1) * t->stride(2) + t->size(3) > INT_MAX) {
        return "pages of <= 16 tokens whose heads lie 2^31 elements apart for the sm90 kernel";
      }
    }
  }
  return "";
#else
  (void)a;
  (void)d;
  (void)o;
  (void)capability;
  return "the sm90 kernel in a build without sm_90a";
#endif
}

// Rows per K / V box of the sm90 kernel: the largest power of two dividing the page, the block
// and the split, so that no box crosses a page; 0 where rows are copied instead.
int sm90_box_rows(const core::PagedDims& d, const PagedFwdOptions& o, int block_n) {
  if (d.page_size <= kSm90RowCopyMaxPage) return 0;
  int rows = std::gcd(int(std::min<std::int64_t>(d.page_size, 256)), block_n);
  if (o.key_splits > 1) rows = std::gcd(rows, o.split_keys);
  return rows;
}

// Query rows per KV head (q_len * GQA group) up to which the decode kernels beat the tensor-core
// paged forward. sm80: measured on the H200 (batch 4, 4096 cached tokens, GQA 32/8, d 128,
// causal; bench/results/h200/paged_prefill.json): the tensor-core time is flat up to 256 rows
// (one 128-row tile per (sequence, query head) walks all 4096 keys), 0.24 ms; the decode kernels
// take 0.086 ms at 64 rows, 0.154 at 128, 0.30 at 192. sm90, since its cache-row copies' v16
// (docs/kernels/cascade.md; H100, bench/results/h100/ab/paged_prefill_crossover.json, the same
// shape at batches 1, 4, 16), decode / tensor-core us: at 32 rows 62.8 / 60.1, 64.2 / 63.9,
// 142.8 / 250.4; at 64 rows 62.9 / 60.1, 74.6 / 63.9, 276.6 / 249.9. The line lies between 32
// and 64 rows (~35 at batch 4, ~56 at batch 16): 48.
constexpr std::int64_t kDecodeMaxRowsSm80 = 128;
constexpr std::int64_t kDecodeMaxRowsSm90 = 48;

}  // namespace

bool paged_fwd_preferred(const PagedAttentionArgs& a, const core::PagedDims& d) {
  if (a.algo != Algo::automatic || !paged_fwd_unsupported(a, d).empty()) return false;
  const std::int64_t most =
      paged_fwd_kernel(a, d) == PagedFwdKernel::sm90 ? kDecodeMaxRowsSm90 : kDecodeMaxRowsSm80;
  return d.q_len * d.group() > most;
}

PagedFwdKernel paged_fwd_kernel(const PagedAttentionArgs& a, const core::PagedDims& d,
                                const PagedFwdOptions& o) {
  if (o.kernel != PagedFwdKernel::automatic) return o.kernel;
  return sm90_unsupported(a, d, o, capability_of(a.q)).empty() ? PagedFwdKernel::sm90
                                                               : PagedFwdKernel::sm80;
}

std::string paged_fwd_unsupported(const PagedAttentionArgs& a, const core::PagedDims& d,
                                  const PagedFwdOptions& o) {
  const int capability = capability_of(a.q);
  if (capability < 0) return "q is not on the current CUDA device";
  if (capability < 80) return "compute capability below 8.0";
  const DType dt = a.q.dtype();
  if ((dt != DType::f16 && dt != DType::bf16) || a.kv.k_pages.dtype() != dt) {
    return "q and pages not both f16 or both bf16";
  }
  if (!sm80::fwd_paged_has_head_dim(int(d.head_dim)) || d.head_dim_v != d.head_dim) {
    return "head dim not in " + sm80::fwd_paged_head_dims_text() + " (or d_v != d)";
  }
  if (a.out.dtype() != dt && a.out.dtype() != DType::f32) return "out neither q's dtype nor f32";
  for (const Tensor* t : {&a.q, &a.out, &a.kv.k_pages, &a.kv.v_pages}) {
    if (!rows_16_byte_aligned(*t)) return "rows not 16-byte aligned";
  }
  if (d.varlen_q) return "packed queries";
  if (a.mask.alibi_slopes.defined()) return "ALiBi";
  if (d.max_pages * d.page_size > INT_MAX || d.q_len * d.group() > INT_MAX) {
    return "2^31 keys or query rows";
  }
  for (const Tensor* t : {&a.kv.k_pages, &a.kv.v_pages, &a.kv.block_table}) {
    for (int i = 0; i < t->rank(); ++i) {
      if (t->stride(i) > INT_MAX) return "page or block-table strides of 2^31 elements";
    }
  }
  if (d.heads_q > 65535) return "more than 65535 query heads";
  const bool positional =
      d.mask.causal || d.mask.window_left >= 0 || d.mask.window_right >= 0 || d.mask.prefix_len > 0;
  if (o.key_splits > 1) {
    if (d.batch != 1) return "key splits of more than one cache sequence";
    if (positional) return "key splits with a positional mask";
    if (o.split_keys <= 0 || o.split_keys % 64 != 0) {
      return "split_keys not a positive multiple of 64";
    }
  }
  if (o.pack_gqa && positional) return "GQA packing with a positional mask";
  if (d.batch * o.key_splits > 65535) return "more than 65535 sequences * key splits";
  if (o.kernel == PagedFwdKernel::sm90) return sm90_unsupported(a, d, o, capability);
  return "";
}

void paged_fwd(const PagedAttentionArgs& a, const core::PagedDims& d, const PagedFwdOptions& o) {
  const std::string why = paged_fwd_unsupported(a, d, o);
  if (!why.empty()) core::fail("q", "a call the tensor-core paged path runs", why);
  if (d.batch == 0 || d.q_len == 0) return;
  const auto stream = static_cast<cudaStream_t>(a.stream);
#if FLASHKIT_HAVE_SM90
  if (paged_fwd_kernel(a, d, o) == PagedFwdKernel::sm90) {
    const int box_rows = sm90_box_rows(d, o, sm90::fwd_paged_block_n(int(d.head_dim)));
    return sm90::fwd_paged(a, fwd_params(a, d, o), kv_params(a, d, o), box_rows, stream,
                           static_cast<cudaEvent_t>(o.started));
  }
#endif
  sm80::fwd_paged(fwd_params(a, d, o), kv_params(a, d, o), stream);
  // The sm80 launch records it once done: later than its CTAs' start, never earlier.
  if (o.started != nullptr) {
    check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(o.started), stream), "cudaEventRecord");
  }
}

}  // namespace flashkit::cuda
