#include "attention_case.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "core/mask_rules.hpp"
#include "core/numeric.hpp"
#include "core/validate.hpp"
#include "cpu/cpu_backend.hpp"
#include "cpu/parallel.hpp"

namespace flashkit::testing {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

std::int64_t total(const std::vector<std::int64_t>& lens) {
  std::int64_t t = 0;
  for (auto l : lens) t += l;
  return t;
}

HostTensor cu_seqlens(const std::vector<std::int64_t>& lens) {
  HostTensor t(DType::i32, {std::int64_t(lens.size()) + 1});
  std::vector<double> offsets{0.0};
  for (auto l : lens) offsets.push_back(offsets.back() + double(l));
  t.set_values(offsets);
  return t;
}

// [.., tokens, heads, dim] shape for this case.
std::vector<std::int64_t> token_shape(const CaseData& c, bool keys, std::int64_t heads,
                                      std::int64_t dim) {
  if (c.spec.varlen) return {keys ? c.total_k : c.total_q, heads, dim};
  return {c.batch, keys ? c.max_k : c.max_q, heads, dim};
}

void fill_problem(const CaseData& c, AttentionProblem& p, Algo algo) {
  p.q = c.q;
  p.k = c.k;
  p.v = c.v;
  p.softmax_scale = c.spec.softmax_scale;
  p.mask.causal = c.spec.causal;
  p.mask.align = c.spec.align;
  p.mask.window_left = c.spec.window_left;
  p.mask.window_right = c.spec.window_right;
  p.mask.prefix_len = c.spec.prefix_len;
  p.mask.diagonal_offset = c.spec.diagonal_offset;
  p.mask.softcap = c.spec.softcap;
  if (c.spec.alibi) p.mask.alibi_slopes = c.alibi_slopes;
  if (c.spec.varlen) {
    p.varlen.cu_seqlens_q = c.cu_seqlens_q;
    p.varlen.cu_seqlens_k = c.cu_seqlens_k;
    p.varlen.max_seqlen_q = c.max_q;
    p.varlen.max_seqlen_k = c.max_k;
  }
  p.algo = algo;
}

// Dense per-(sequence, head) access to a case's logical values.
struct Dense {
  const CaseData& c;
  std::vector<double> q, k, v, dout;
  std::int64_t index(bool keys, std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t heads,
                     std::int64_t dim, std::int64_t e) const {
    std::int64_t row;
    if (c.spec.varlen) {
      std::int64_t start = 0;
      const auto& lens = keys ? c.spec.seqlens_k : c.spec.seqlens_q;
      for (std::int64_t i = 0; i < b; ++i) start += lens[std::size_t(i)];
      row = start + t;
    } else {
      row = b * (keys ? c.max_k : c.max_q) + t;
    }
    return (row * heads + h) * dim + e;
  }
};

double slope_of(const CaseData& c, std::int64_t h) {
  return c.spec.alibi ? c.alibi_slopes.at(h) : 0.0;
}

core::MaskRule rule_of(const CaseSpec& s) {
  core::MaskRule r;
  r.causal = s.causal;
  r.bottom_right = s.align == CausalAlign::bottom_right;
  r.window_left = s.window_left;
  r.window_right = s.window_right;
  r.prefix_len = s.prefix_len;
  r.diagonal_offset = s.diagonal_offset;
  r.softcap = s.softcap;
  return r;
}

double scale_of(const CaseSpec& s) {
  return s.softmax_scale ? double(*s.softmax_scale) : 1.0 / std::sqrt(double(s.head_dim));
}

// One (sequence, query head)'s rows, copied out contiguously ([token][dim]), and its keys and
// values also transposed ([dim][token]), so that the plain reference's inner loops run over
// independent outputs (vectorisable) while each output still sums in the serial order.
struct HeadRows {
  std::vector<double> q, k, v, dout, k_t, v_t;
};

std::vector<double> rows_of(const Dense& x, const std::vector<double>& values, bool keys,
                            std::int64_t b, std::int64_t h, std::int64_t heads, std::int64_t dim,
                            std::int64_t len) {
  std::vector<double> rows(std::size_t(len * dim));
  if (len == 0) return rows;
  const std::int64_t first = x.index(keys, b, 0, h, heads, dim, 0), stride = heads * dim;
  for (std::int64_t t = 0; t < len; ++t) {
    std::copy_n(values.begin() + std::ptrdiff_t(first + t * stride), dim,
                rows.begin() + std::ptrdiff_t(t * dim));
  }
  return rows;
}

std::vector<double> transposed(const std::vector<double>& rows, std::int64_t len,
                               std::int64_t dim) {
  std::vector<double> t(rows.size());
  for (std::int64_t j = 0; j < len; ++j)
    for (std::int64_t e = 0; e < dim; ++e)
      t[std::size_t(e * len + j)] = rows[std::size_t(j * dim + e)];
  return t;
}

HeadRows head_rows(const Dense& x, std::int64_t b, std::int64_t h) {
  const CaseSpec& s = x.c.spec;
  const std::int64_t lq = s.seqlens_q[std::size_t(b)], lk = s.seqlens_k[std::size_t(b)];
  const std::int64_t hk = h / (s.heads_q / s.heads_kv), d = s.head_dim, dv = s.dim_v();
  HeadRows r{rows_of(x, x.q, false, b, h, s.heads_q, d, lq),
             rows_of(x, x.k, true, b, hk, s.heads_kv, d, lk),
             rows_of(x, x.v, true, b, hk, s.heads_kv, dv, lk),
             rows_of(x, x.dout, false, b, h, s.heads_q, dv, lq),
             {},
             {}};
  r.k_t = transposed(r.k, lk, d);
  r.v_t = transposed(r.v, lk, dv);
  return r;
}

// out[j] = sum over e of a[e] * b_t[e][j], for j < n, each sum in the order of e.
void dots(const double* a, const std::vector<double>& b_t, std::int64_t dim, std::int64_t n,
          std::vector<double>& out) {
  out.assign(std::size_t(n), 0.0);
  for (std::int64_t e = 0; e < dim; ++e) {
    const double ae = a[e];
    const double* be = b_t.data() + e * n;
    for (std::int64_t j = 0; j < n; ++j) out[std::size_t(j)] += ae * be[j];
  }
}

// acc[e] += w * row[e] for e < dim.
void add_scaled(std::vector<double>& acc, double w, const double* row, std::int64_t dim) {
  for (std::int64_t e = 0; e < dim; ++e) acc[std::size_t(e)] += w * row[e];
}

// Plain attention of one (sequence, query head) with products rounded to `dt`. Fills p (rounded
// probabilities, 0 where masked), the pre-softcap tanh values, o (rounded) and lse.
struct PlainHead {
  std::vector<double> p, tanh_value, o, lse;
};

PlainHead plain_head(const Dense& x, const HeadRows& rows, std::int64_t b, std::int64_t h) {
  const CaseData& c = x.c;
  const CaseSpec& s = c.spec;
  const DType dt = s.dtype;
  const auto rule = rule_of(s);
  const std::int64_t lq = s.seqlens_q[std::size_t(b)], lk = s.seqlens_k[std::size_t(b)];
  const std::int64_t d = s.head_dim, dv = s.dim_v();
  const std::int64_t shift = core::diagonal_shift(rule, lq, lk);
  PlainHead r;
  r.p.assign(std::size_t(lq * lk), 0.0);
  r.tanh_value.assign(std::size_t(lq * lk), 0.0);
  r.o.assign(std::size_t(lq * dv), 0.0);
  r.lse.assign(std::size_t(lq), kNegInf);
  std::vector<double> srow, acc;
  for (std::int64_t i = 0; i < lq; ++i) {
    const std::int64_t diag = i + shift;
    dots(rows.q.data() + i * d, rows.k_t, d, lk, srow);
    double m = kNegInf;
    for (std::int64_t j = 0; j < lk; ++j) {
      double& sv = srow[std::size_t(j)];
      if (!core::key_visible(rule, diag, j, lk)) {
        sv = kNegInf;
        continue;
      }
      sv = core::round_to(dt, sv * scale_of(s));
      if (s.softcap > 0) {
        const double t = std::tanh(sv / s.softcap);
        r.tanh_value[std::size_t(i * lk + j)] = t;
        sv = core::round_to(dt, s.softcap * t);
      }
      sv += core::alibi_bias(slope_of(c, h), diag, j);
      m = std::max(m, sv);
    }
    if (m == kNegInf) continue;
    double l = 0;
    for (auto& sv : srow) l += (sv = std::exp(sv - m));  // srow now holds the weights
    r.lse[std::size_t(i)] = m + std::log(l);
    double* pi = r.p.data() + i * lk;
    acc.assign(std::size_t(dv), 0.0);
    for (std::int64_t j = 0; j < lk; ++j) {
      pi[j] = core::round_to(dt, srow[std::size_t(j)] / l);
      add_scaled(acc, pi[j], rows.v.data() + j * dv, dv);
    }
    for (std::int64_t e = 0; e < dv; ++e)
      r.o[std::size_t(i * dv + e)] = core::round_to(dt, acc[std::size_t(e)]);
  }
  return r;
}

Dense dense_of(const CaseData& c) {
  return Dense{c, c.q.values(), c.k.values(), c.v.values(), c.dout.values()};
}

}  // namespace

std::string CaseSpec::name() const {
  std::ostringstream s;
  s << dtype_name(dtype) << " d=" << head_dim;
  if (head_dim_v > 0) s << " dv=" << head_dim_v;
  s << " hq=" << heads_q << " hkv=" << heads_kv << (varlen ? " varlen" : "") << " q=[";
  for (std::size_t i = 0; i < seqlens_q.size(); ++i) s << (i ? "," : "") << seqlens_q[i];
  s << "] k=[";
  for (std::size_t i = 0; i < seqlens_k.size(); ++i) s << (i ? "," : "") << seqlens_k[i];
  s << "]";
  if (causal) s << (align == CausalAlign::top_left ? " causal-tl" : " causal-br");
  if (window_left >= 0 || window_right >= 0)
    s << " window=(" << window_left << "," << window_right << ")";
  if (prefix_len > 0) s << " prefix=" << prefix_len;
  if (diagonal_offset != 0) s << " offset=" << diagonal_offset;
  if (softcap > 0) s << " softcap=" << softcap;
  if (alibi) s << " alibi";
  s << " seed=" << seed;
  return s.str();
}

std::vector<std::int64_t> CaseData::out_shape() const {
  return token_shape(*this, false, spec.heads_q, spec.dim_v());
}

std::vector<std::int64_t> CaseData::lse_shape() const {
  if (spec.varlen) return {spec.heads_q, total_q};
  return {batch, spec.heads_q, max_q};
}

AttentionArgs CaseData::forward_args(const Tensor& out, const Tensor& lse, Algo algo) const {
  AttentionArgs a;
  fill_problem(*this, a, algo);
  a.out = out;
  a.lse = lse;
  return a;
}

BackwardArgs CaseData::backward_args(const Tensor& out, const Tensor& lse, const Tensor& dq,
                                     const Tensor& dk, const Tensor& dv, Algo algo) const {
  BackwardArgs a;
  fill_problem(*this, a, algo);
  a.out = out;
  a.lse = lse;
  a.dout = dout;
  a.dq = dq;
  a.dk = dk;
  a.dv = dv;
  return a;
}

CaseData make_case(const CaseSpec& spec) {
  CaseData c;
  c.spec = spec;
  c.batch = std::int64_t(spec.seqlens_q.size());
  c.max_q =
      spec.seqlens_q.empty() ? 0 : *std::max_element(spec.seqlens_q.begin(), spec.seqlens_q.end());
  c.max_k =
      spec.seqlens_k.empty() ? 0 : *std::max_element(spec.seqlens_k.begin(), spec.seqlens_k.end());
  c.total_q = total(spec.seqlens_q);
  c.total_k = total(spec.seqlens_k);
  std::mt19937 rng(spec.seed);
  c.q = HostTensor(spec.dtype, token_shape(c, false, spec.heads_q, spec.head_dim));
  c.k = HostTensor(spec.dtype, token_shape(c, true, spec.heads_kv, spec.head_dim));
  c.v = HostTensor(spec.dtype, token_shape(c, true, spec.heads_kv, spec.dim_v()));
  c.dout = HostTensor(spec.dtype, c.out_shape());
  c.q.fill_random(rng);
  c.k.fill_random(rng);
  c.v.fill_random(rng);
  c.dout.fill_random(rng);
  if (spec.varlen) {
    c.cu_seqlens_q = cu_seqlens(spec.seqlens_q);
    c.cu_seqlens_k = cu_seqlens(spec.seqlens_k);
  }
  if (spec.alibi) {
    // Slopes as in the ALiBi paper: 2^(-8 (h + 1) / H).
    c.alibi_slopes = HostTensor(DType::f32, {spec.heads_q});
    std::vector<double> slopes;
    for (std::int64_t h = 0; h < spec.heads_q; ++h) {
      slopes.push_back(std::exp2(-8.0 * double(h + 1) / double(spec.heads_q)));
    }
    c.alibi_slopes.set_values(slopes);
  }
  return c;
}

ForwardResult oracle_forward(const CaseData& c) {
  HostTensor out(DType::f64, c.out_shape());
  HostTensor lse(DType::f32, c.lse_shape());
  out.poison();
  lse.poison();
  attention_forward(c.forward_args(out, lse, Algo::reference));
  return {out.values(), lse.values()};
}

BackwardResult oracle_backward(const CaseData& c) {
  HostTensor out(DType::f64, c.out_shape());
  HostTensor lse(DType::f32, c.lse_shape());
  HostTensor dq(DType::f64, c.q.shape()), dk(DType::f64, c.k.shape()), dv(DType::f64, c.v.shape());
  dq.poison();
  dk.poison();
  dv.poison();
  attention_forward(c.forward_args(out, lse, Algo::reference));
  attention_backward(c.backward_args(out, lse, dq, dk, dv, Algo::reference));
  return {dq.values(), dk.values(), dv.values()};
}

// The plain references run one task per (sequence, head) on the CPU backend's pool: each writes
// its own outputs, and every sum keeps its order, so the results do not depend on the threads.
ForwardResult plain_forward(const CaseData& c) {
  const Dense x = dense_of(c);
  const CaseSpec& s = c.spec;
  ForwardResult r;
  std::int64_t out_n = 1, lse_n = 1;
  for (auto v : c.out_shape()) out_n *= v;
  for (auto v : c.lse_shape()) lse_n *= v;
  r.out.assign(std::size_t(out_n), 0.0);
  r.lse.assign(std::size_t(lse_n), kNegInf);
  const std::int64_t dv = s.dim_v();
  std::vector<std::int64_t> q_start(std::size_t(c.batch) + 1, 0);
  for (std::int64_t b = 0; b < c.batch; ++b) {
    q_start[std::size_t(b) + 1] = q_start[std::size_t(b)] + s.seqlens_q[std::size_t(b)];
  }
  cpu::parallel_for(c.batch * s.heads_q, [&](std::int64_t task) {
    const std::int64_t b = task / s.heads_q, h = task % s.heads_q;
    const std::int64_t lq = s.seqlens_q[std::size_t(b)];
    const PlainHead ph = plain_head(x, head_rows(x, b, h), b, h);
    for (std::int64_t i = 0; i < lq; ++i) {
      const std::int64_t at = x.index(false, b, i, h, s.heads_q, dv, 0);
      std::copy_n(ph.o.begin() + std::ptrdiff_t(i * dv), dv, r.out.begin() + std::ptrdiff_t(at));
      const std::int64_t li = s.varlen ? h * c.total_q + q_start[std::size_t(b)] + i
                                       : (b * s.heads_q + h) * c.max_q + i;
      r.lse[std::size_t(li)] = ph.lse[std::size_t(i)];
    }
  });
  return r;
}

// One task per (sequence, KV head): its query heads in order, so dK and dV sum over the group in
// the same order as a serial loop.
BackwardResult plain_backward(const CaseData& c) {
  const Dense x = dense_of(c);
  const CaseSpec& s = c.spec;
  const DType dt = s.dtype;
  const std::int64_t d = s.head_dim, dv = s.dim_v(), group = s.heads_q / s.heads_kv;
  BackwardResult r;
  r.dq.assign(x.q.size(), 0.0);
  r.dk.assign(x.k.size(), 0.0);
  r.dv.assign(x.v.size(), 0.0);
  const double scale = scale_of(s);
  cpu::parallel_for(c.batch * s.heads_kv, [&](std::int64_t task) {
    const std::int64_t b = task / s.heads_kv, hk = task % s.heads_kv;
    const std::int64_t lq = s.seqlens_q[std::size_t(b)], lk = s.seqlens_k[std::size_t(b)];
    std::vector<double> dk(std::size_t(lk * d), 0.0), dvv(std::size_t(lk * dv), 0.0);
    std::vector<double> dp, acc;
    for (std::int64_t h = hk * group; h < (hk + 1) * group; ++h) {
      const HeadRows rows = head_rows(x, b, h);
      const PlainHead ph = plain_head(x, rows, b, h);
      // dS = P * (dP - D), every product rounded to dt; accumulations per output then rounded.
      std::vector<double> ds(std::size_t(lq * lk), 0.0);
      for (std::int64_t i = 0; i < lq; ++i) {
        const double* doi = rows.dout.data() + i * dv;
        double di = 0;
        for (std::int64_t e = 0; e < dv; ++e) di += doi[e] * ph.o[std::size_t(i * dv + e)];
        di = core::round_to(dt, di);
        dots(doi, rows.v_t, dv, lk, dp);
        for (std::int64_t j = 0; j < lk; ++j) {
          const double p = ph.p[std::size_t(i * lk + j)];
          if (p == 0) continue;
          double g = core::round_to(dt, p * (core::round_to(dt, dp[std::size_t(j)]) - di));
          if (s.softcap > 0) {
            const double t = ph.tanh_value[std::size_t(i * lk + j)];
            g = core::round_to(dt, g * (1.0 - t * t));
          }
          ds[std::size_t(i * lk + j)] = g;
        }
      }
      for (std::int64_t i = 0; i < lq; ++i) {
        acc.assign(std::size_t(d), 0.0);
        for (std::int64_t j = 0; j < lk; ++j) {
          add_scaled(acc, ds[std::size_t(i * lk + j)], rows.k.data() + j * d, d);
        }
        for (std::int64_t e = 0; e < d; ++e) {
          r.dq[std::size_t(x.index(false, b, i, h, s.heads_q, d, e))] =
              core::round_to(dt, acc[std::size_t(e)] * scale);
        }
      }
      for (std::int64_t j = 0; j < lk; ++j) {
        acc.assign(std::size_t(d), 0.0);
        for (std::int64_t i = 0; i < lq; ++i) {
          add_scaled(acc, ds[std::size_t(i * lk + j)], rows.q.data() + i * d, d);
        }
        for (std::int64_t e = 0; e < d; ++e)
          dk[std::size_t(j * d + e)] += acc[std::size_t(e)] * scale;
        acc.assign(std::size_t(dv), 0.0);
        for (std::int64_t i = 0; i < lq; ++i) {
          add_scaled(acc, ph.p[std::size_t(i * lk + j)], rows.dout.data() + i * dv, dv);
        }
        for (std::int64_t e = 0; e < dv; ++e) dvv[std::size_t(j * dv + e)] += acc[std::size_t(e)];
      }
    }
    for (std::int64_t j = 0; j < lk; ++j) {
      for (std::int64_t e = 0; e < d; ++e) {
        r.dk[std::size_t(x.index(true, b, j, hk, s.heads_kv, d, e))] =
            core::round_to(dt, dk[std::size_t(j * d + e)]);
      }
      for (std::int64_t e = 0; e < dv; ++e) {
        r.dv[std::size_t(x.index(true, b, j, hk, s.heads_kv, dv, e))] =
            core::round_to(dt, dvv[std::size_t(j * dv + e)]);
      }
    }
  });
  return r;
}

std::string check_close(const std::string& what, const std::vector<double>& got,
                        const std::vector<double>& oracle, const std::vector<double>& plain,
                        double atol) {
  if (got.size() != oracle.size() || plain.size() != oracle.size()) {
    return what + ": size mismatch (" + std::to_string(got.size()) + " vs " +
           std::to_string(oracle.size()) + ")";
  }
  double err = 0, plain_err = 0;
  std::size_t worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i])) {
      return what + "[" + std::to_string(i) + "] is NaN (unwritten or invalid)";
    }
    const double e = std::fabs(got[i] - oracle[i]);
    if (e > err) {
      err = e;
      worst = i;
    }
    plain_err = std::max(plain_err, std::fabs(plain[i] - oracle[i]));
  }
  const double bound = 2 * plain_err + atol;
  if (err <= bound) return "";
  std::ostringstream s;
  s << what << ": max error " << err << " at [" << worst << "] (got " << got[worst] << ", oracle "
    << oracle[worst] << ") exceeds 2 * plain error " << plain_err << " + " << atol;
  return s.str();
}

std::string check_lse(const std::vector<double>& got, const std::vector<double>& oracle,
                      double tol) {
  if (got.size() != oracle.size()) return "lse: size mismatch";
  for (std::size_t i = 0; i < got.size(); ++i) {
    const bool empty = oracle[i] == kNegInf;
    if (empty ? got[i] != kNegInf : !(std::fabs(got[i] - oracle[i]) <= tol)) {
      std::ostringstream s;
      s << "lse[" << i << "]: got " << got[i] << ", oracle " << oracle[i] << " (tol " << tol << ")";
      return s.str();
    }
  }
  return "";
}

}  // namespace flashkit::testing
