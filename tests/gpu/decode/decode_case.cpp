#include "decode_case.hpp"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>

#include "core/numeric.hpp"
#include "core/validate.hpp"

namespace flashkit::testing {

namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

// A view of `shape` whose last dim is allocated `pad` elements wider when padding.
HostTensor maybe_padded(DType dtype, std::vector<std::int64_t> shape, bool padded,
                        std::int64_t pad) {
  std::vector<std::int64_t> alloc = shape;
  if (padded) alloc.back() += pad;
  return HostTensor(dtype, shape, alloc);
}

// Every byte of the allocation behind `t` set to 0xFF: NaN in f16, bf16, f32 and e4m3.
void fill_nan_bytes(HostTensor& t) {
  const Tensor& v = t.view();
  std::int64_t last = 0;
  for (int i = 0; i < v.rank(); ++i) last += (v.size(i) - 1) * v.stride(i);
  std::memset(v.data(), 0xFF, std::size_t(last + 1) * dtype_size(v.dtype()));
}

std::int64_t offset4(const Tensor& t, std::int64_t a, std::int64_t b, std::int64_t c,
                     std::int64_t d) {
  return a * t.stride(0) + b * t.stride(1) + c * t.stride(2) + d * t.stride(3);
}

}  // namespace

std::string DecodeSpec::name() const {
  std::ostringstream s;
  s << "kv " << dtype_name(kv_dtype) << " q " << dtype_name(q_dtype) << " out "
    << dtype_name(out_dtype) << " page " << page_size << " heads " << heads_q << "/" << heads_kv
    << " d " << head_dim << " seq_lens {";
  for (std::size_t b = 0; b < seq_lens.size(); ++b) {
    s << (b ? ", " : "") << seq_lens[b] << ":" << q_lens[b];
  }
  s << "}" << (packed ? " packed" : "") << (padded ? " padded" : "") << (causal ? " causal" : "")
    << " window " << window_left << "," << window_right << " prefix " << prefix_len << " softcap "
    << softcap << (alibi ? " alibi" : "") << " v_amplitudes {";
  for (std::size_t i = 0; i < v_amplitudes.size(); ++i) s << (i ? ", " : "") << v_amplitudes[i];
  s << "} q_amplitude " << q_amplitude << " seed " << seed;
  return s.str();
}

std::vector<std::int64_t> DecodeCase::out_shape() const {
  if (spec.packed) return {total_q, spec.heads_q, spec.head_dim};
  return {spec.batch(), max_q, spec.heads_q, spec.head_dim};
}

std::vector<std::int64_t> DecodeCase::lse_shape() const {
  if (spec.packed) return {spec.heads_q, total_q};
  return {spec.batch(), spec.heads_q, max_q};
}

DecodeCase make_decode_case(const DecodeSpec& spec) {
  DecodeCase c;
  c.spec = spec;
  std::mt19937 rng(spec.seed);
  const std::int64_t batch = spec.batch(), ps = spec.page_size, d = spec.head_dim;
  const std::int64_t hkv = spec.heads_kv;

  // Pages: each sequence's in token order, ids shuffled over the pool; two pages nobody owns,
  // and one block-table column past every sequence's pages, point at NaN.
  std::int64_t used = 0;
  for (std::int64_t len : spec.seq_lens) {
    used += ceil_div(len, ps);
    c.max_pages = std::max(c.max_pages, ceil_div(len, ps));
  }
  c.max_pages += 1;
  c.num_pages = used + 2;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(c.num_pages));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  const std::int32_t nan_page = ids.back();

  c.block_table = HostTensor(DType::i32, {batch, c.max_pages});
  c.seq_lens = HostTensor(DType::i32, {batch});
  std::size_t next = 0;
  for (std::int64_t b = 0; b < batch; ++b) {
    c.seq_lens.view().data_as<std::int32_t>()[b] = std::int32_t(spec.seq_lens[std::size_t(b)]);
    const std::int64_t pages = ceil_div(spec.seq_lens[std::size_t(b)], ps);
    for (std::int64_t p = 0; p < c.max_pages; ++p) {
      c.block_table.view().data_as<std::int32_t>()[b * c.max_pages + p] =
          p < pages ? ids[next++] : nan_page;
    }
  }

  const std::vector<std::int64_t> pool{c.num_pages, ps, hkv, d};
  const std::int64_t pad = spec.kv_dtype == DType::e4m3 ? 16 : 8;  // 16 bytes per padded row
  c.k_pages = maybe_padded(spec.kv_dtype, pool, spec.padded, pad);
  c.v_pages = maybe_padded(spec.kv_dtype, pool, spec.padded, pad);
  fill_nan_bytes(c.k_pages);
  fill_nan_bytes(c.v_pages);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  const bool fp8 = spec.kv_dtype == DType::e4m3;
  const auto v_amplitude = [&](std::int64_t page) {
    return spec.v_amplitudes[std::size_t(page) % spec.v_amplitudes.size()];
  };
  if (fp8) {
    // Scales off any power of two, so dequantising rounds in f32 (as the kernels do it).
    std::uniform_real_distribution<double> scale(0.004, 0.05);
    c.k_scale = HostTensor(DType::f32, {c.num_pages, hkv});
    c.v_scale = HostTensor(DType::f32, {c.num_pages, hkv});
    for (std::int64_t i = 0; i < c.num_pages * hkv; ++i) {
      c.k_scale.view().data_as<float>()[i] = float(scale(rng));
      c.v_scale.view().data_as<float>()[i] = float(scale(rng) * v_amplitude(i / hkv));
    }
  }
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t t = 0; t < spec.seq_lens[std::size_t(b)]; ++t) {
      const std::int64_t page =
          c.block_table.view().data_as<std::int32_t>()[b * c.max_pages + t / ps];
      for (std::int64_t h = 0; h < hkv; ++h) {
        for (std::int64_t e = 0; e < d; ++e) {
          for (HostTensor* pages : {&c.k_pages, &c.v_pages}) {
            const std::int64_t at = offset4(pages->view(), page, t % ps, h, e);
            const double x = unit(rng) * (pages == &c.v_pages ? v_amplitude(page) : 1.0);
            if (fp8) {
              const HostTensor& s = pages == &c.k_pages ? c.k_scale : c.v_scale;
              const float scale = s.view().data_as<float>()[page * hkv + h];
              pages->view().data_as<std::uint8_t>()[at] = core::float_to_e4m3(float(x) / scale);
            } else {
              core::store_from_double(pages->view().data(), spec.kv_dtype, at, x);
            }
          }
        }
      }
    }
  }

  c.max_q = *std::max_element(spec.q_lens.begin(), spec.q_lens.end());
  c.total_q = std::accumulate(spec.q_lens.begin(), spec.q_lens.end(), std::int64_t(0));
  if (spec.packed) {
    c.cu_seqlens_q = HostTensor(DType::i32, {batch + 1});
    std::int32_t* cu = c.cu_seqlens_q.view().data_as<std::int32_t>();
    cu[0] = 0;
    for (std::int64_t b = 0; b < batch; ++b)
      cu[b + 1] = cu[b] + std::int32_t(spec.q_lens[std::size_t(b)]);
    c.q = maybe_padded(spec.q_dtype, {c.total_q, spec.heads_q, d}, spec.padded, 8);
  } else {
    c.q = maybe_padded(spec.q_dtype, {batch, c.max_q, spec.heads_q, d}, spec.padded, 8);
  }
  c.q.fill_random(rng, -spec.q_amplitude, spec.q_amplitude);
  if (spec.alibi) {
    c.alibi_slopes = HostTensor(DType::f32, {spec.heads_q});
    for (std::int64_t h = 0; h < spec.heads_q; ++h) {
      c.alibi_slopes.view().data_as<float>()[h] =
          std::exp2(-8.0f * float(h + 1) / float(spec.heads_q));
    }
  }
  return c;
}

PagedAttentionArgs DecodeCase::args(const Tensor& out, const Tensor& lse, int num_splits,
                                    const Tensor& workspace, Algo algo) const {
  PagedAttentionArgs a;
  a.q = q.view();
  if (spec.packed) {
    a.cu_seqlens_q = cu_seqlens_q.view();
    a.max_seqlen_q = max_q;
  }
  a.kv.k_pages = k_pages.view();
  a.kv.v_pages = v_pages.view();
  a.kv.k_scale = k_scale.view();
  a.kv.v_scale = v_scale.view();
  a.kv.block_table = block_table.view();
  a.kv.seq_lens = seq_lens.view();
  a.out = out;
  a.lse = lse;
  a.softmax_scale = spec.softmax_scale;
  a.mask.causal = spec.causal;
  a.mask.window_left = spec.window_left;
  a.mask.window_right = spec.window_right;
  a.mask.prefix_len = spec.prefix_len;
  a.mask.softcap = spec.softcap;
  a.mask.alibi_slopes = alibi_slopes.view();
  a.num_splits = num_splits;
  a.workspace = workspace;
  a.algo = algo;
  return a;
}

DeviceDecodeCase::DeviceDecodeCase(const DecodeCase& c)
    : q(c.q),
      k_pages(c.k_pages),
      v_pages(c.v_pages),
      k_scale(c.k_scale),
      v_scale(c.v_scale),
      block_table(c.block_table),
      seq_lens(c.seq_lens),
      cu_seqlens_q(c.cu_seqlens_q),
      alibi_slopes(c.alibi_slopes) {}

PagedAttentionArgs DeviceDecodeCase::args(const DecodeCase& c, const Tensor& out, const Tensor& lse,
                                          int num_splits, const Tensor& workspace) const {
  PagedAttentionArgs a = c.args(out, lse, num_splits, workspace, Algo::automatic);
  a.q = q.view();
  if (c.spec.packed) a.cu_seqlens_q = cu_seqlens_q.view();
  a.kv.k_pages = k_pages.view();
  a.kv.v_pages = v_pages.view();
  a.kv.k_scale = k_scale.view();
  a.kv.v_scale = v_scale.view();
  a.kv.block_table = block_table.view();
  a.kv.seq_lens = seq_lens.view();
  a.mask.alibi_slopes = alibi_slopes.view();
  return a;
}

DecodeResult decode_oracle(const DecodeCase& c) {
  HostTensor out(DType::f64, c.out_shape()), lse(DType::f32, c.lse_shape());
  out.poison();
  lse.poison();
  paged_attention(c.args(out, lse, 1, Tensor(), Algo::reference));
  return {out.values(), lse.values()};
}

std::int64_t decode_workspace_elems(const DecodeCase& c, int num_splits) {
  const DecodeSpec& s = c.spec;
  if (num_splits == 0) {
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    return plan_paged_split(s.batch(), c.max_q, s.heads_q, s.heads_kv, s.head_dim,
                            c.max_pages * s.page_size, sms)
        .workspace_elems;
  }
  const std::int64_t rows = s.packed ? c.total_q : s.batch() * c.max_q;
  return core::paged_workspace_elems(num_splits, rows, s.heads_q, s.head_dim);
}

DecodeResult run_decode_gpu(const DecodeCase& c, int num_splits, int workspace_offset,
                            std::vector<double>* workspace_after) {
  HostTensor out = maybe_padded(c.spec.out_dtype, c.out_shape(), c.spec.padded, 8);
  HostTensor lse(DType::f32, c.lse_shape());
  const DeviceDecodeCase dev(c);
  DeviceTensor d_out(out), d_lse(lse);
  d_out.poison();
  d_lse.poison();
  HostTensor ws;
  DeviceTensor d_ws;
  Tensor workspace;
  if (num_splits != 1) {
    const std::int64_t elems = std::max<std::int64_t>(decode_workspace_elems(c, num_splits), 1);
    ws = HostTensor(DType::f32, {elems + workspace_offset});
    d_ws = DeviceTensor(ws);
    d_ws.poison();
    const Tensor& whole = d_ws.view();
    workspace = Tensor(static_cast<float*>(whole.data()) + workspace_offset, DType::f32, {elems},
                       {1}, whole.device());
  }
  paged_attention(dev.args(c, d_out.view(), d_lse.view(), num_splits, workspace));
  expect_device_ok();
  d_out.copy_to(out);
  d_lse.copy_to(lse);
  if (workspace_after != nullptr) {
    workspace_after->clear();
    if (workspace.defined()) {
      d_ws.copy_to(ws);
      *workspace_after = ws.values();
    }
  }
  return {out.values(), lse.values()};
}

std::string compare_decode(const DecodeResult& got, const DecodeResult& want, DType out_dtype,
                           double out_scale) {
  const double ulp = out_dtype == DType::bf16  ? std::ldexp(1.0, -8)
                     : out_dtype == DType::f16 ? std::ldexp(1.0, -11)
                                               : 0.0;
  const double tol_out = (ulp + 2e-4) * out_scale, tol_lse = 1e-4;
  if (got.out.size() != want.out.size() || got.lse.size() != want.lse.size()) return "sizes differ";
  std::ostringstream msg;
  double worst = 0;
  for (std::size_t i = 0; i < got.out.size(); ++i) {
    const double diff = std::abs(got.out[i] - want.out[i]);
    if (!(diff <= tol_out) && !(diff <= worst)) {
      worst = std::isnan(diff) ? std::numeric_limits<double>::infinity() : diff;
      msg.str("");
      msg << "out[" << i << "] = " << got.out[i] << ", oracle " << want.out[i] << " (tolerance "
          << tol_out << ")";
    }
  }
  if (worst > 0) return msg.str();
  for (std::size_t i = 0; i < got.lse.size(); ++i) {
    const bool want_inf = std::isinf(want.lse[i]);
    const bool ok =
        want_inf ? got.lse[i] == want.lse[i] : std::abs(got.lse[i] - want.lse[i]) <= tol_lse;
    if (!ok) {
      msg << "lse[" << i << "] = " << got.lse[i] << ", oracle " << want.lse[i];
      return msg.str();
    }
  }
  return "";
}

}  // namespace flashkit::testing
