#include "paged_case.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>

#include "core/numeric.hpp"

namespace flashkit::testing {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A contiguous tensor, or (strided) a view into an allocation with padded inner dims.
HostTensor make_tensor(DType dtype, std::vector<std::int64_t> shape, bool strided) {
  if (!strided) return HostTensor(dtype, shape);
  std::vector<std::int64_t> alloc = shape;
  for (std::size_t i = 1; i < alloc.size(); ++i) alloc[i] += 3;
  return HostTensor(dtype, shape, alloc);
}

// Element offset of [page, slot, head, e] in a pages view.
std::int64_t page_offset(const Tensor& t, std::int64_t page, std::int64_t slot, std::int64_t h,
                         std::int64_t e) {
  return page * t.stride(0) + slot * t.stride(1) + h * t.stride(2) + e;
}

// Fills pages with `values` ([num_pages, page_size, heads, dim] logical order; NaN where no token
// is), quantising to e4m3 with amax / 448 per page and head.
void store_pages(HostTensor& pages, HostTensor& scales, const std::vector<double>& values) {
  const Tensor& t = pages.view();
  const std::int64_t np = t.size(0), ps = t.size(1), hk = t.size(2), d = t.size(3);
  auto value = [&](std::int64_t p, std::int64_t s, std::int64_t h, std::int64_t e) {
    return values[std::size_t(((p * ps + s) * hk + h) * d + e)];
  };
  if (t.dtype() != DType::e4m3) {
    pages.set_values(values);
    return;
  }
  auto* bytes = t.data_as<std::uint8_t>();
  for (std::int64_t p = 0; p < np; ++p) {
    for (std::int64_t h = 0; h < hk; ++h) {
      double amax = 0.0;
      for (std::int64_t s = 0; s < ps; ++s) {
        for (std::int64_t e = 0; e < d; ++e) {
          if (!std::isnan(value(p, s, h, e))) amax = std::max(amax, std::fabs(value(p, s, h, e)));
        }
      }
      const float scale = amax > 0.0 ? float(amax / 448.0) : float(kNaN);  // unused page: NaN
      scales.view().data_as<float>()[p * scales.view().stride(0) + h * scales.view().stride(1)] =
          scale;
      for (std::int64_t s = 0; s < ps; ++s) {
        for (std::int64_t e = 0; e < d; ++e) {
          bytes[page_offset(t, p, s, h, e)] = core::float_to_e4m3(float(value(p, s, h, e) / scale));
        }
      }
    }
  }
}

double load_kv(const PagedCase& c, const HostTensor& pages, const HostTensor& scales,
               std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t e) {
  const std::int64_t ps = c.spec.page_size;
  const std::int64_t page = c.pages[std::size_t(b)][std::size_t(t / ps)];
  const Tensor& v = pages.view();
  double x = core::load_as_double(v.data(), v.dtype(), page_offset(v, page, t % ps, h, e));
  if (v.dtype() == DType::e4m3) {
    x *= scales.view()
             .data_as<const float>()[page * scales.view().stride(0) + h * scales.view().stride(1)];
  }
  return x;
}

}  // namespace

std::string PagedSpec::name() const {
  std::ostringstream s;
  s << "kv=" << dtype_name(kv_dtype) << " q=" << dtype_name(q_dtype) << " page=" << page_size
    << " heads=" << heads_q << "/" << heads_kv << " d=" << head_dim;
  if (dim_v() != head_dim) s << " dv=" << dim_v();
  s << " lens=";
  for (std::size_t b = 0; b < seq_lens.size(); ++b) s << (b ? "," : "") << seq_lens[b];
  s << " q=";
  for (std::size_t b = 0; b < q_lens.size(); ++b) s << (b ? "," : "") << q_lens[b];
  if (packed) s << " packed";
  if (causal) s << " causal";
  if (window_left >= 0 || window_right >= 0) s << " window=" << window_left << "," << window_right;
  if (prefix_len > 0) s << " prefix=" << prefix_len;
  if (softcap > 0) s << " softcap=" << softcap;
  if (softmax_scale) s << " scale=" << *softmax_scale;
  if (alibi) s << " alibi";
  if (strided) s << " strided";
  return s.str();
}

PagedCase make_paged_case(const PagedSpec& spec) {
  PagedCase c;
  c.spec = spec;
  std::mt19937 rng(spec.seed);
  const std::int64_t batch = spec.batch(), ps = spec.page_size, hk = spec.heads_kv;
  const std::int64_t d = spec.head_dim;

  // Pages: each sequence takes the next ids of a shuffled pool, with 3 pages left unused.
  std::int64_t needed = 0;
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t n = (spec.seq_lens[std::size_t(b)] + ps - 1) / ps;
    needed += n;
    c.max_pages = std::max(c.max_pages, n);
  }
  c.max_pages += 1;  // a spare column of -1: never read
  c.num_pages = needed + 3;
  std::vector<std::int32_t> pool(static_cast<std::size_t>(c.num_pages));
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  std::vector<std::int64_t> filled(static_cast<std::size_t>(c.num_pages), 0);  // tokens per page
  std::size_t next = 0;
  c.pages.resize(std::size_t(batch));
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t len = spec.seq_lens[std::size_t(b)];
    for (std::int64_t t0 = 0; t0 < len; t0 += ps) {
      const std::int32_t page = pool[next++];
      c.pages[std::size_t(b)].push_back(page);
      filled[std::size_t(page)] = std::min(ps, len - t0);
    }
  }

  // K and V: uniform [-1, 1) drawn for every slot in one fixed order (so specs that differ only
  // in kv_dtype hold the same underlying values), NaN where no token is.
  for (auto* pages : {&c.k_pages, &c.v_pages}) {
    const std::int64_t dim = pages == &c.k_pages ? d : spec.dim_v();
    std::uniform_real_distribution<double> dist(-1.0, 1.0);
    std::vector<double> values(std::size_t(c.num_pages * ps * hk * dim));
    for (std::int64_t p = 0; p < c.num_pages; ++p) {
      for (std::int64_t i = 0; i < ps * hk * dim; ++i) {
        const double x = dist(rng);
        const bool used = i / (hk * dim) < filled[std::size_t(p)];
        values[std::size_t(p * ps * hk * dim + i)] = used ? x : kNaN;
      }
    }
    *pages = make_tensor(spec.kv_dtype, {c.num_pages, ps, hk, dim}, spec.strided);
    pages->poison();
    HostTensor& scales = pages == &c.k_pages ? c.k_scale : c.v_scale;
    if (spec.kv_dtype == DType::e4m3) scales = HostTensor(DType::f32, {c.num_pages, hk});
    store_pages(*pages, scales, values);
  }

  c.block_table = make_tensor(DType::i32, {batch, c.max_pages}, spec.strided);
  c.seq_lens = HostTensor(DType::i32, {batch});
  std::vector<double> table(std::size_t(batch * c.max_pages), -1.0), lens;
  for (std::int64_t b = 0; b < batch; ++b) {
    const auto& ids = c.pages[std::size_t(b)];
    for (std::size_t p = 0; p < ids.size(); ++p) table[std::size_t(b * c.max_pages) + p] = ids[p];
    lens.push_back(double(spec.seq_lens[std::size_t(b)]));
  }
  c.block_table.set_values(table);
  c.seq_lens.set_values(lens);

  for (auto n : spec.q_lens) {
    if (!spec.packed && n != spec.q_lens[0]) {
      throw std::invalid_argument("PagedSpec: unequal q_lens need packed = true");
    }
    c.total_q += n;
    c.max_q = std::max(c.max_q, n);
  }
  if (spec.packed) {
    c.q = make_tensor(spec.q_dtype, {c.total_q, spec.heads_q, d}, spec.strided);
    c.cu_seqlens_q = HostTensor(DType::i32, {batch + 1});
    std::vector<double> cu{0.0};
    for (auto n : spec.q_lens) cu.push_back(cu.back() + double(n));
    c.cu_seqlens_q.set_values(cu);
  } else {
    c.q = make_tensor(spec.q_dtype, {batch, c.max_q, spec.heads_q, d}, spec.strided);
  }
  c.q.fill_random(rng);
  if (spec.alibi) {
    c.alibi_slopes = HostTensor(DType::f32, {spec.heads_q});
    c.alibi_slopes.fill_random(rng, 0.01, 0.5);
  }
  return c;
}

std::vector<std::int64_t> PagedCase::out_shape() const {
  std::vector<std::int64_t> shape = q.shape();
  shape.back() = spec.dim_v();
  return shape;
}

std::vector<std::int64_t> PagedCase::lse_shape() const {
  if (spec.packed) return {spec.heads_q, total_q};
  return {spec.batch(), spec.heads_q, max_q};
}

PagedKV PagedCase::kv() const {
  PagedKV kv;
  kv.k_pages = k_pages;
  kv.v_pages = v_pages;
  if (spec.kv_dtype == DType::e4m3) {
    kv.k_scale = k_scale;
    kv.v_scale = v_scale;
  }
  kv.block_table = block_table;
  kv.seq_lens = seq_lens;
  return kv;
}

PagedAttentionArgs PagedCase::args(const Tensor& out, const Tensor& lse, Algo algo,
                                   int num_splits) const {
  PagedAttentionArgs a;
  a.q = q;
  if (spec.packed) {
    a.cu_seqlens_q = cu_seqlens_q;
    a.max_seqlen_q = max_q;
  }
  a.kv = kv();
  a.out = out;
  a.lse = lse;
  a.mask.causal = spec.causal;
  a.mask.window_left = spec.window_left;
  a.mask.window_right = spec.window_right;
  a.mask.prefix_len = spec.prefix_len;
  a.mask.softcap = spec.softcap;
  a.softmax_scale = spec.softmax_scale;
  if (spec.alibi) a.mask.alibi_slopes = alibi_slopes;
  a.num_splits = num_splits;
  a.algo = algo;
  return a;
}

double PagedCase::k_at(std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t e) const {
  return load_kv(*this, k_pages, k_scale, b, t, h, e);
}

double PagedCase::v_at(std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t e) const {
  return load_kv(*this, v_pages, v_scale, b, t, h, e);
}

PagedResult run_paged(const PagedCase& c, Algo algo, int num_splits, DType out_dtype,
                      const Tensor& workspace) {
  HostTensor out = make_tensor(out_dtype, c.out_shape(), c.spec.strided);
  HostTensor lse(DType::f32, c.lse_shape());
  out.poison();
  lse.poison();
  PagedAttentionArgs a = c.args(out, lse, algo, num_splits);
  a.workspace = workspace;
  paged_attention(a);
  PagedResult r{out.values(), lse.values()};
  if (!c.spec.packed) {  // [batch, heads, q_len] -> [heads, batch * q_len]
    const std::int64_t batch = c.spec.batch(), hq = c.spec.heads_q, n = c.max_q;
    std::vector<double> packed(r.lse.size());
    for (std::int64_t b = 0; b < batch; ++b) {
      for (std::int64_t h = 0; h < hq; ++h) {
        for (std::int64_t i = 0; i < n; ++i) {
          packed[std::size_t(h * batch * n + b * n + i)] = r.lse[std::size_t((b * hq + h) * n + i)];
        }
      }
    }
    r.lse = std::move(packed);
  }
  return r;
}

CaseData contiguous_case(const PagedCase& c, DType dtype) {
  CaseSpec s;
  s.dtype = dtype;
  s.seqlens_q = c.spec.q_lens;
  s.seqlens_k = c.spec.seq_lens;
  s.varlen = true;
  s.heads_q = c.spec.heads_q;
  s.heads_kv = c.spec.heads_kv;
  s.head_dim = c.spec.head_dim;
  s.head_dim_v = c.spec.head_dim_v;
  s.causal = c.spec.causal;
  s.align = CausalAlign::bottom_right;
  s.window_left = c.spec.window_left;
  s.window_right = c.spec.window_right;
  s.prefix_len = c.spec.prefix_len;
  s.softcap = c.spec.softcap;
  s.softmax_scale = c.spec.softmax_scale;
  s.alibi = c.spec.alibi;
  CaseData cd = make_case(s);
  cd.q.set_values(c.q.values());  // a batch of equal q_lens is the packed order already
  std::vector<double> k, v;
  for (std::int64_t b = 0; b < c.spec.batch(); ++b) {
    for (std::int64_t t = 0; t < c.spec.seq_lens[std::size_t(b)]; ++t) {
      for (std::int64_t h = 0; h < c.spec.heads_kv; ++h) {
        for (std::int64_t e = 0; e < c.spec.head_dim; ++e) k.push_back(c.k_at(b, t, h, e));
        for (std::int64_t e = 0; e < c.spec.dim_v(); ++e) v.push_back(c.v_at(b, t, h, e));
      }
    }
  }
  cd.k.set_values(k);
  cd.v.set_values(v);
  if (c.spec.alibi) cd.alibi_slopes.set_values(c.alibi_slopes.values());
  return cd;
}

PagedResult contiguous_oracle(const PagedCase& c) {
  const ForwardResult r = oracle_forward(contiguous_case(c, DType::f64));
  return {r.out, r.lse};
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double worst = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return std::numeric_limits<double>::infinity();
    if (std::isinf(a[i]) || std::isinf(b[i])) {
      if (a[i] != b[i]) return std::numeric_limits<double>::infinity();
      continue;
    }
    worst = std::max(worst, std::fabs(a[i] - b[i]));
  }
  return worst;
}

}  // namespace flashkit::testing
