#include "attention_case.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "core/mask_rules.hpp"
#include "core/numeric.hpp"
#include "core/validate.hpp"
#include "cpu/cpu_backend.hpp"

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
  r.softcap = s.softcap;
  return r;
}

double scale_of(const CaseSpec& s) {
  return s.softmax_scale ? double(*s.softmax_scale) : 1.0 / std::sqrt(double(s.head_dim));
}

// Plain attention of one (sequence, query head) with products rounded to `dt`. Fills p (rounded
// probabilities, 0 where masked), the pre-softcap tanh values, o (rounded) and lse.
struct PlainHead {
  std::vector<double> p, tanh_value, o, lse;
};

PlainHead plain_head(const Dense& x, std::int64_t b, std::int64_t h) {
  const CaseData& c = x.c;
  const CaseSpec& s = c.spec;
  const DType dt = s.dtype;
  const auto rule = rule_of(s);
  const std::int64_t lq = s.seqlens_q[std::size_t(b)], lk = s.seqlens_k[std::size_t(b)];
  const std::int64_t hk = h / (s.heads_q / s.heads_kv), d = s.head_dim, dv = s.dim_v();
  const std::int64_t shift = core::diagonal_shift(rule, lq, lk);
  PlainHead r;
  r.p.assign(std::size_t(lq * lk), 0.0);
  r.tanh_value.assign(std::size_t(lq * lk), 0.0);
  r.o.assign(std::size_t(lq * dv), 0.0);
  r.lse.assign(std::size_t(lq), kNegInf);
  std::vector<double> srow(static_cast<std::size_t>(lk));
  for (std::int64_t i = 0; i < lq; ++i) {
    const std::int64_t diag = i + shift;
    double m = kNegInf;
    for (std::int64_t j = 0; j < lk; ++j) {
      double& sv = srow[std::size_t(j)];
      if (!core::key_visible(rule, diag, j, lk)) {
        sv = kNegInf;
        continue;
      }
      double dot = 0;
      for (std::int64_t e = 0; e < d; ++e) {
        dot += x.q[std::size_t(x.index(false, b, i, h, s.heads_q, d, e))] *
               x.k[std::size_t(x.index(true, b, j, hk, s.heads_kv, d, e))];
      }
      sv = core::round_to(dt, dot * scale_of(s));
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
    for (std::int64_t j = 0; j < lk; ++j) l += std::exp(srow[std::size_t(j)] - m);
    r.lse[std::size_t(i)] = m + std::log(l);
    for (std::int64_t j = 0; j < lk; ++j) {
      r.p[std::size_t(i * lk + j)] = core::round_to(dt, std::exp(srow[std::size_t(j)] - m) / l);
    }
    for (std::int64_t e = 0; e < dv; ++e) {
      double acc = 0;
      for (std::int64_t j = 0; j < lk; ++j) {
        acc += r.p[std::size_t(i * lk + j)] *
               x.v[std::size_t(x.index(true, b, j, hk, s.heads_kv, dv, e))];
      }
      r.o[std::size_t(i * dv + e)] = core::round_to(dt, acc);
    }
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
  std::int64_t q_start = 0;
  for (std::int64_t b = 0; b < c.batch; ++b) {
    const std::int64_t lq = s.seqlens_q[std::size_t(b)];
    for (std::int64_t h = 0; h < s.heads_q; ++h) {
      const PlainHead ph = plain_head(x, b, h);
      for (std::int64_t i = 0; i < lq; ++i) {
        for (std::int64_t e = 0; e < dv; ++e) {
          r.out[std::size_t(x.index(false, b, i, h, s.heads_q, dv, e))] =
              ph.o[std::size_t(i * dv + e)];
        }
        const std::int64_t li =
            s.varlen ? h * c.total_q + q_start + i : (b * s.heads_q + h) * c.max_q + i;
        r.lse[std::size_t(li)] = ph.lse[std::size_t(i)];
      }
    }
    q_start += lq;
  }
  return r;
}

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
  for (std::int64_t b = 0; b < c.batch; ++b) {
    const std::int64_t lq = s.seqlens_q[std::size_t(b)], lk = s.seqlens_k[std::size_t(b)];
    for (std::int64_t h = 0; h < s.heads_q; ++h) {
      const std::int64_t hk = h / group;
      const PlainHead ph = plain_head(x, b, h);
      auto qi = [&](std::int64_t i, std::int64_t e) {
        return std::size_t(x.index(false, b, i, h, s.heads_q, d, e));
      };
      auto kj = [&](std::int64_t j, std::int64_t e) {
        return std::size_t(x.index(true, b, j, hk, s.heads_kv, d, e));
      };
      auto vj = [&](std::int64_t j, std::int64_t e) {
        return std::size_t(x.index(true, b, j, hk, s.heads_kv, dv, e));
      };
      auto oi = [&](std::int64_t i, std::int64_t e) {
        return std::size_t(x.index(false, b, i, h, s.heads_q, dv, e));
      };
      // dS = P * (dP - D), every product rounded to dt; accumulations per output then rounded.
      std::vector<double> ds(std::size_t(lq * lk), 0.0);
      for (std::int64_t i = 0; i < lq; ++i) {
        double di = 0;
        for (std::int64_t e = 0; e < dv; ++e)
          di += x.dout[oi(i, e)] * ph.o[std::size_t(i * dv + e)];
        di = core::round_to(dt, di);
        for (std::int64_t j = 0; j < lk; ++j) {
          const double p = ph.p[std::size_t(i * lk + j)];
          if (p == 0) continue;
          double dp = 0;
          for (std::int64_t e = 0; e < dv; ++e) dp += x.dout[oi(i, e)] * x.v[vj(j, e)];
          double g = core::round_to(dt, p * (core::round_to(dt, dp) - di));
          if (s.softcap > 0) {
            const double t = ph.tanh_value[std::size_t(i * lk + j)];
            g = core::round_to(dt, g * (1.0 - t * t));
          }
          ds[std::size_t(i * lk + j)] = g;
        }
      }
      for (std::int64_t i = 0; i < lq; ++i) {
        for (std::int64_t e = 0; e < d; ++e) {
          double acc = 0;
          for (std::int64_t j = 0; j < lk; ++j) acc += ds[std::size_t(i * lk + j)] * x.k[kj(j, e)];
          r.dq[qi(i, e)] = core::round_to(dt, acc * scale);
        }
      }
      for (std::int64_t j = 0; j < lk; ++j) {
        for (std::int64_t e = 0; e < d; ++e) {
          double acc = 0;
          for (std::int64_t i = 0; i < lq; ++i) acc += ds[std::size_t(i * lk + j)] * x.q[qi(i, e)];
          r.dk[kj(j, e)] += acc * scale;
        }
        for (std::int64_t e = 0; e < dv; ++e) {
          double acc = 0;
          for (std::int64_t i = 0; i < lq; ++i)
            acc += ph.p[std::size_t(i * lk + j)] * x.dout[oi(i, e)];
          r.dv[vj(j, e)] += acc;
        }
      }
    }
  }
  for (auto& v : r.dk) v = core::round_to(dt, v);
  for (auto& v : r.dv) v = core::round_to(dt, v);
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
