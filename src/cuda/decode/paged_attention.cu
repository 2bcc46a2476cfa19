// paged_attention on CUDA: the decode kernels' own limits on top of core::validate_paged, the
// kernel parameters, and the launches (stage 1; the split merge when dims.num_splits > 1). No
// allocation and no synchronisation, so a call can be captured in a CUDA graph.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>

#include "core/softmax_state.hpp"
#include "core/validate.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/device.hpp"
#include "cuda/decode/decode_backend.hpp"
#include "cuda/decode/decode_launch.hpp"
#include "cuda/decode/decode_params.hpp"
#include "cuda/decode/decode_shape.cuh"
#include "cuda/decode/mma_shape.cuh"

namespace flashkit::cuda {

namespace {

std::string num(std::int64_t v) {
  return std::to_string(v);
}

template <int... kValues>
bool in_list(std::integer_sequence<int, kValues...>, std::int64_t value) {
  return ((value == kValues) || ...);
}

template <int... kValues>
std::string list_text(std::integer_sequence<int, kValues...>) {
  std::string s;
  ((s += (s.empty() ? "{" : ", ") + std::to_string(kValues)), ...);
  return s + "}";
}

// 16-byte loads of row pieces: the pointer 16-byte aligned, every stride but the last (the
// contiguous head dim) a multiple of 16 bytes.
void check_vector_rows(const std::string& name, const Tensor& t) {
  const auto address = reinterpret_cast<std::uintptr_t>(t.data());
  if (address % 16 != 0) {
    core::fail(name + ".data", "a 16-byte aligned pointer (the decode kernels load 16-byte pieces)",
               "an address = " + num(std::int64_t(address % 16)) + " mod 16");
  }
  const std::int64_t elems = 16 / std::int64_t(dtype_size(t.dtype()));
  for (int i = 0; i + 1 < t.rank(); ++i) {
    if (t.stride(i) % elems != 0) {
      core::fail(name + ".stride[" + num(i) + "]",
                 "a multiple of " + num(elems) + " elements (16-byte aligned rows)",
                 num(t.stride(i)));
    }
  }
}

void check_limits(const PagedAttentionArgs& a, const core::PagedDims& d) {
  const DType kv = a.kv.k_pages.dtype();
  if (kv != DType::f16 && kv != DType::bf16 && kv != DType::e4m3) {
    core::fail("kv.k_pages.dtype", "f16, bf16 or e4m3 pages on cuda", dtype_name(kv));
  }
  if (!in_list(decode::HeadDims{}, d.head_dim)) {
    core::fail("q.shape[-1]",
               "a head dim in " + list_text(decode::HeadDims{}) + " for the CUDA decode kernels",
               num(d.head_dim));
  }
  if (d.head_dim_v != d.head_dim) {
    core::fail("kv.v_pages.shape[3]", num(d.head_dim) + " (the head dim of q) on cuda",
               num(d.head_dim_v));
  }
  core::expect_dtype_in("out", a.out, {DType::f32, DType::f16, DType::bf16});
  check_vector_rows("kv.k_pages", a.kv.k_pages);
  check_vector_rows("kv.v_pages", a.kv.v_pages);
  // Keys, query rows and grid dims are ints in the kernels.
  if (d.max_pages * d.page_size > INT_MAX) {
    core::fail("kv.block_table.shape[1]", "max_pages * page_size < 2^31 tokens on cuda",
               num(d.max_pages) + " pages of " + num(d.page_size));
  }
  if (a.q.size(0) > INT_MAX || d.q_len * d.group() > INT_MAX) {
    core::fail("q.shape", "fewer than 2^31 query rows on cuda", a.q.shape_str());
  }
  if (d.batch > 65535) {
    core::fail("kv.block_table.shape[0]", "a batch <= 65535 on cuda", num(d.batch));
  }
  if (d.num_splits > 65535) core::fail("num_splits", "<= 65535 on cuda", num(d.num_splits));
  // The split merge runs a warp per (query row, head, 32 elements), 4 warps per CTA.
  const std::int64_t rows = d.varlen_q ? a.q.size(0) : d.batch * d.q_len;
  if (d.num_splits > 1 && rows * d.heads_q * (d.head_dim / 32) / 4 >= INT_MAX) {
    core::fail("q.shape", "fewer than 2^33 (query row, head, 32 elements) items to merge on cuda",
               a.q.shape_str());
  }
  if (d.num_splits > 1 && !a.workspace.defined()) {
    core::fail("workspace",
               num(core::paged_workspace_elems(d.num_splits, rows, d.heads_q, d.head_dim_v)) +
                   " f32 elements for " + num(d.num_splits) +
                   " splits (the CUDA path allocates nothing, so that it can be graph-captured;"
                   " plan_paged_split gives the size)",
               "none");
  }
}

// CTAs of the tensor-core kernel with `warps` warps that one SM holds, for these pages, within
// `smem_limit` bytes per CTA (tile_smem_limit()); 0 when one CTA is over it (the 8-warp CTA's
// 192 KB on an A100's 163).
int mma_blocks(DType kv, std::int64_t head_dim, int warps, int smem_limit) {
  const auto per_sm = [&](auto elem) {
    using Elem = decltype(elem);
    const decode::MmaFootprint f =
        head_dim == 64 ? decode::mma_footprint<Elem, 64>(decode::MmaWarpCounts{}, warps)
                       : decode::mma_footprint<Elem, 128>(decode::MmaWarpCounts{}, warps);
    return f.smem_bytes > smem_limit ? 0 : std::min(f.register_blocks, smem_limit / f.smem_bytes);
  };
  switch (kv) {
    case DType::f16:
      return per_sm(__half{});
    case DType::bf16:
      return per_sm(__nv_bfloat16{});
    default:
      return per_sm(__nv_fp8_e4m3{});
  }
}

// The decode kernel of a call: warps per CTA of the tensor-core kernel (0: the CUDA-core kernel)
// and the key splits it runs.
struct KernelChoice {
  int mma_warps, splits;
};

// The stream rate follows the bytes in flight per SM, so: the most warps resident per SM among
// the CTA shapes that run the whole grid in one wave (BENCH.md, d 128: batch 1's 264 CTAs 4
// warps, 2 per SM; batch 64's 512 CTAs 2 warps, 4 per SM), else 2 warps (the most CTAs per SM).
// A plan of 2 splits whose CTAs fill one wave two per SM runs each task as one 8-warp CTA
// instead: the same warps per SM, the two halves merged in shared memory rather than by the
// split merge, a second kernel (BENCH.md batch 16 / 8k: 127.4 against 128.7 us bf16, 72.5
// against 75.9 us e4m3; docs/kernels/decode.md v3.10). FLASHKIT_DECODE_KERNEL picks one by name
// for benchmarks and the lineage: cuda_cores (v2), mma (v3, the default), mma2, mma3, mma4 or
// mma8, with the plan's splits. Head dims without a tensor-core kernel (decode::MmaHeadDims)
// take the CUDA-core one.
KernelChoice choose_kernel(const core::PagedDims& d, DType kv, std::int64_t tasks,
                           const Device& device) {
  const int splits = d.num_splits;
  if (!in_list(decode::MmaHeadDims{}, d.head_dim)) return {0, splits};
  const char* env = std::getenv("FLASHKIT_DECODE_KERNEL");
  const std::string choice = env != nullptr ? env : "mma";
  const int smem_limit = tile_smem_limit();
  if (choice == "cuda_cores") return {0, splits};
  if (choice.size() == 4 && choice.compare(0, 3, "mma") == 0 &&
      in_list(decode::MmaWarpCounts{}, choice[3] - '0')) {
    const int warps = choice[3] - '0';
    if (mma_blocks(kv, d.head_dim, warps, smem_limit) == 0) {
      core::fail("FLASHKIT_DECODE_KERNEL",
                 "a CTA shape whose shared memory fits this device's " + num(smem_limit) +
                     " bytes per CTA",
                 choice);
    }
    return {warps, splits};
  }
  if (choice != "mma") {
    core::fail("FLASHKIT_DECODE_KERNEL", "cuda_cores, mma, mma2, mma3, mma4 or mma8 (or unset)",
               choice);
  }
  const int sms = multiprocessor_count(device);
  if (splits == 2 && tasks <= sms && mma_blocks(kv, d.head_dim, 8, smem_limit) >= 1) {
    return {8, 1};
  }
  const std::int64_t ctas = tasks * splits;
  int best = 2;
  std::int64_t best_warps = 0;
  for (int warps : {4, 3, 2}) {
    const int blocks = mma_blocks(kv, d.head_dim, warps, smem_limit);
    if (blocks == 0 || ctas > std::int64_t(blocks) * sms) continue;  // more than one wave
    const std::int64_t per_sm = std::min<std::int64_t>((ctas + sms - 1) / sms, blocks);
    if (per_sm * warps > best_warps) {
      best_warps = per_sm * warps;
      best = warps;
    }
  }
  return {best, splits};
}

int log2_exact(std::int64_t pow2) {
  int s = 0;
  while ((std::int64_t(1) << s) < pow2) ++s;
  return s;
}

PagedParams make_params(const PagedAttentionArgs& a, const core::PagedDims& d) {
  PagedParams p{};
  p.q = a.q.data();
  p.out = a.out.data();
  p.lse = a.lse.defined() ? a.lse.data_as<float>() : nullptr;
  p.q_layout = core::token_layout(a.q, d.varlen_q);
  p.out_layout = core::token_layout(a.out, d.varlen_q);
  if (p.lse != nullptr) p.lse_layout = core::lse_layout(a.lse, d.varlen_q);

  const PagedKV& kv = a.kv;
  p.k_pages = kv.k_pages.data();
  p.v_pages = kv.v_pages.data();
  p.k_strides = {kv.k_pages.stride(0), kv.k_pages.stride(1), kv.k_pages.stride(2)};
  p.v_strides = {kv.v_pages.stride(0), kv.v_pages.stride(1), kv.v_pages.stride(2)};
  if (d.fp8_kv) {
    p.k_scale = kv.k_scale.data_as<const float>();
    p.v_scale = kv.v_scale.data_as<const float>();
    p.k_scale_page = kv.k_scale.stride(0);
    p.k_scale_head = kv.k_scale.stride(1);
    p.v_scale_page = kv.v_scale.stride(0);
    p.v_scale_head = kv.v_scale.stride(1);
  }
  p.block_table = kv.block_table.data_as<const std::int32_t>();
  p.table_batch = kv.block_table.stride(0);
  p.table_page = kv.block_table.stride(1);
  p.seq_lens = kv.seq_lens.data_as<const std::int32_t>();
  p.seq_lens_stride = kv.seq_lens.stride(0);
  if (d.varlen_q) {
    p.cu_seqlens_q = a.cu_seqlens_q.data_as<const std::int32_t>();
    p.cu_seqlens_stride = a.cu_seqlens_q.stride(0);
  }
  const Tensor& slopes = a.mask.alibi_slopes;
  if (slopes.defined()) {
    p.alibi_slopes = slopes.data_as<const float>();
    p.alibi_batch_stride = slopes.rank() == 2 ? slopes.stride(0) : 0;
    p.alibi_head_stride = slopes.stride(slopes.rank() - 1);
  }

  p.batch = int(d.batch);
  p.q_len = int(d.q_len);
  p.heads_q = int(d.heads_q);
  p.heads_kv = int(d.heads_kv);
  p.group = int(d.group());
  p.head_dim = int(d.head_dim);
  p.page_shift = log2_exact(d.page_size);
  const std::int64_t rows = d.q_len * d.group();
  constexpr int kMmaRows = decode::MmaShape<__nv_bfloat16, 128, 2>::kRowsPerCta;
  const KernelChoice kernel =
      choose_kernel(d, a.kv.k_pages.dtype(),
                    d.batch * d.heads_kv * ((rows + kMmaRows - 1) / kMmaRows), a.q.device());
  p.mma_warps = kernel.mma_warps;
  p.num_splits = kernel.splits;
  p.ws_rows = d.varlen_q ? a.q.size(0) : d.batch * d.q_len;
  if (p.num_splits > 1) {
    p.ws_o = a.workspace.data_as<float>();
    p.ws_lse = p.ws_o + std::int64_t(p.num_splits) * p.ws_rows * d.heads_q * d.head_dim_v;
  }
  p.rows_per_cta = p.mma_warps > 0 ? kMmaRows
                                   : decode::rows_per_cta(
                                         rows, d.fp8_kv ? decode::kMaxRowsPerCta<__nv_fp8_e4m3>
                                                        : decode::kMaxRowsPerCta<__nv_bfloat16>);
  p.row_tiles = int((rows + p.rows_per_cta - 1) / p.rows_per_cta);
  p.scale = float(d.scale);
  p.scale_log2 = float(d.scale * core::kLog2e);
  p.mask = d.mask;
  p.q_dtype = a.q.dtype();
  p.out_dtype = a.out.dtype();
  return p;
}

// The kernel make_params chose has an instance that folds prior states (decode::mma_folds).
bool folds(const PagedParams& p, DType kv) {
  if (p.num_splits != 1 || p.mma_warps == 0) return false;
  switch (kv) {
    case DType::f16:
      return decode::mma_folds<__half>(p.mma_warps);
    case DType::bf16:
      return decode::mma_folds<__nv_bfloat16>(p.mma_warps);
    default:
      return false;
  }
}

}  // namespace

bool paged_attention_folds(const PagedAttentionArgs& args, const core::PagedDims& dims) {
  return folds(make_params(args, dims), args.kv.k_pages.dtype());
}

void paged_attention(const PagedAttentionArgs& args, const core::PagedDims& dims) {
  paged_attention(args, dims, PriorStates{});
}

void paged_attention(const PagedAttentionArgs& args, const core::PagedDims& dims,
                     const PriorStates& priors) {
  const int capability = current_device_capability("q", args.q.device());
  if (capability < 80) {
    core::fail("q.device", "compute capability >= 8.0 for the CUDA decode kernels",
               "sm_" + num(capability));
  }
  check_limits(args, dims);
  PagedParams p = make_params(args, dims);
  if (priors.states > 0) {
    if (!folds(p, args.kv.k_pages.dtype())) {
      core::fail("priors", "a call on a kernel that folds prior states (paged_attention_folds)",
                 num(p.num_splits) + " key splits, " + num(p.mma_warps) + " tensor-core warps");
    }
    p.prior_o = priors.o;
    p.prior_lse = priors.lse;
    p.prior_states = priors.states;
    p.prior_o_state = priors.o_state;
    p.prior_o_row = priors.o_row;
    p.prior_o_head = priors.o_head;
    p.prior_lse_state = priors.lse_state;
    p.prior_lse_row = priors.lse_row;
    p.prior_lse_head = priors.lse_head;
  }
  if (p.batch == 0 || p.q_len == 0 || p.ws_rows == 0) return;  // no query: nothing to write
  const auto stream = static_cast<cudaStream_t>(args.stream);
  switch (args.kv.k_pages.dtype()) {
    case DType::f16:
      decode::launch_decode<__half>(p, stream);
      break;
    case DType::bf16:
      decode::launch_decode<__nv_bfloat16>(p, stream);
      break;
    default:
      decode::launch_decode<__nv_fp8_e4m3>(p, stream);
      break;
  }
  if (p.num_splits > 1) decode::launch_split_combine(p, stream);
}

}  // namespace flashkit::cuda
