// The fp64 oracle. Plain loops, two passes over each score row, nothing clever: it is what every
// other path is judged against, so it must be obviously right.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/numeric.hpp"
#include "cpu/cpu_backend.hpp"
#include "cpu/parallel.hpp"
#include "cpu/tiled_common.hpp"

namespace flashkit::cpu {

namespace {

using core::element_offset;
using core::load_as_double;
using core::store_from_double;
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Reads rows of one (sequence, head) of a token tensor into a dense [len, dim] double matrix.
std::vector<double> gather(const Tensor& t, const core::TokenLayout& lay, std::int64_t b,
                           std::int64_t start, std::int64_t len, std::int64_t h, std::int64_t dim) {
  std::vector<double> m(static_cast<std::size_t>(len * dim));
  for (std::int64_t i = 0; i < len; ++i) {
    const std::int64_t base = element_offset(lay, b, start, i, h);
    for (std::int64_t e = 0; e < dim; ++e) {
      m[static_cast<std::size_t>(i * dim + e)] = load_as_double(t.data(), t.dtype(), base + e);
    }
  }
  return m;
}

void scatter(const Tensor& t, const core::TokenLayout& lay, std::int64_t b, std::int64_t start,
             std::int64_t len, std::int64_t h, std::int64_t dim, const std::vector<double>& m) {
  for (std::int64_t i = 0; i < len; ++i) {
    const std::int64_t base = element_offset(lay, b, start, i, h);
    for (std::int64_t e = 0; e < dim; ++e) {
      store_from_double(t.data(), t.dtype(), base + e, m[static_cast<std::size_t>(i * dim + e)]);
    }
  }
}

// One (sequence, query head) of the forward in double: scores, their visibility, probabilities.
struct HeadForward {
  std::int64_t len_q, len_k, dim, dim_v;
  std::vector<double> q, k, v;     // [len, dim]
  std::vector<double> o;           // [len_q, dim_v]
  std::vector<double> lse;         // [len_q]
  std::vector<double> tanh_value;  // [len_q, len_k]: tanh(raw / softcap) for softcap's gradient
  std::vector<double> p;           // [len_q, len_k]: softmax probabilities (0 where masked)
};

void run_head_forward(HeadForward& f, const core::ProblemDims& d, double slope) {
  const auto& rule = d.mask;
  const std::int64_t shift = core::diagonal_shift(rule, f.len_q, f.len_k);
  const std::size_t nq = std::size_t(f.len_q), nk = std::size_t(f.len_k);
  f.o.assign(nq * std::size_t(f.dim_v), 0.0);
  f.lse.assign(nq, kNegInf);
  f.p.assign(nq * nk, 0.0);
  f.tanh_value.assign(rule.softcap > 0 ? nq * nk : 0, 0.0);
  std::vector<double> s(nk);
  for (std::int64_t i = 0; i < f.len_q; ++i) {
    const std::int64_t diag = i + shift;
    double m = kNegInf;
    for (std::int64_t j = 0; j < f.len_k; ++j) {
      if (!core::key_visible(rule, diag, j, f.len_k)) {
        s[std::size_t(j)] = kNegInf;
        continue;
      }
      double dot = 0.0;
      for (std::int64_t e = 0; e < f.dim; ++e) {
        dot += f.q[std::size_t(i * f.dim + e)] * f.k[std::size_t(j * f.dim + e)];
      }
      double score = double(d.scale) * dot;
      if (rule.softcap > 0) {
        const double t = std::tanh(score / rule.softcap);
        f.tanh_value[std::size_t(i) * nk + std::size_t(j)] = t;
        score = rule.softcap * t;
      }
      score += core::alibi_bias(slope, diag, j);
      s[std::size_t(j)] = score;
      m = std::max(m, score);
    }
    if (m == kNegInf) continue;  // saw no key: o = 0, lse = -inf
    double l = 0.0;
    for (std::int64_t j = 0; j < f.len_k; ++j) l += std::exp(s[std::size_t(j)] - m);
    f.lse[std::size_t(i)] = m + std::log(l);
    for (std::int64_t j = 0; j < f.len_k; ++j) {
      const double pij = std::exp(s[std::size_t(j)] - m) / l;
      f.p[std::size_t(i) * nk + std::size_t(j)] = pij;
      for (std::int64_t e = 0; e < f.dim_v; ++e) {
        f.o[std::size_t(i * f.dim_v + e)] += pij * f.v[std::size_t(j * f.dim_v + e)];
      }
    }
  }
}

}  // namespace

void reference_forward(const AttentionArgs& args, const core::ProblemDims& d) {
  const auto spans = sequence_spans(args, d);
  const auto lq = core::token_layout(args.q, d.varlen), lk = core::token_layout(args.k, d.varlen),
             lv = core::token_layout(args.v, d.varlen), lo = core::token_layout(args.out, d.varlen);
  const bool want_lse = args.lse.defined();
  const auto ll = want_lse ? core::lse_layout(args.lse, d.varlen) : core::TokenLayout{};
  parallel_for(d.batch * d.heads_q, [&](std::int64_t task) {
    const std::int64_t b = task / d.heads_q, h = task % d.heads_q, hk = h / d.group();
    const core::SeqSpan& sp = spans[std::size_t(b)];
    HeadForward f{sp.len_q, sp.len_k, d.head_dim, d.head_dim_v, {}, {}, {}, {}, {}, {}, {}};
    f.q = gather(args.q, lq, b, sp.q_start, sp.len_q, h, d.head_dim);
    f.k = gather(args.k, lk, b, sp.k_start, sp.len_k, hk, d.head_dim);
    f.v = gather(args.v, lv, b, sp.k_start, sp.len_k, hk, d.head_dim_v);
    run_head_forward(f, d, tiled::alibi_slope(args.mask.alibi_slopes, b, h));
    scatter(args.out, lo, b, sp.q_start, sp.len_q, h, d.head_dim_v, f.o);
    if (want_lse) {
      for (std::int64_t i = 0; i < sp.len_q; ++i) {
        args.lse.data_as<float>()[element_offset(ll, b, sp.q_start, i, h)] =
            float(f.lse[std::size_t(i)]);
      }
    }
  });
}

void reference_backward(const BackwardArgs& args, const core::ProblemDims& d) {
  const auto spans = sequence_spans(args, d);
  const auto lq = core::token_layout(args.q, d.varlen), lk = core::token_layout(args.k, d.varlen),
             lv = core::token_layout(args.v, d.varlen),
             ldo = core::token_layout(args.dout, d.varlen),
             ldq = core::token_layout(args.dq, d.varlen),
             ldk = core::token_layout(args.dk, d.varlen),
             ldv = core::token_layout(args.dv, d.varlen);
  const double softcap = d.mask.softcap;
  // One task per (sequence, KV head): it owns dK and dV of that head and the dQ of its group.
  parallel_for(d.batch * d.heads_kv, [&](std::int64_t task) {
    const std::int64_t b = task / d.heads_kv, hk = task % d.heads_kv;
    const core::SeqSpan& sp = spans[std::size_t(b)];
    const std::size_t nk = std::size_t(sp.len_k);
    std::vector<double> dk(nk * std::size_t(d.head_dim), 0.0);
    std::vector<double> dv(nk * std::size_t(d.head_dim_v), 0.0);
    for (std::int64_t h = hk * d.group(); h < (hk + 1) * d.group(); ++h) {
      HeadForward f{sp.len_q, sp.len_k, d.head_dim, d.head_dim_v, {}, {}, {}, {}, {}, {}, {}};
      f.q = gather(args.q, lq, b, sp.q_start, sp.len_q, h, d.head_dim);
      f.k = gather(args.k, lk, b, sp.k_start, sp.len_k, hk, d.head_dim);
      f.v = gather(args.v, lv, b, sp.k_start, sp.len_k, hk, d.head_dim_v);
      run_head_forward(f, d, tiled::alibi_slope(args.mask.alibi_slopes, b, h));
      const auto dout = gather(args.dout, ldo, b, sp.q_start, sp.len_q, h, d.head_dim_v);
      std::vector<double> dq(std::size_t(sp.len_q * d.head_dim), 0.0);
      for (std::int64_t i = 0; i < sp.len_q; ++i) {
        // D_i = rowsum(dO_i * O_i)
        double di = 0.0;
        for (std::int64_t e = 0; e < d.head_dim_v; ++e) {
          di += dout[std::size_t(i * d.head_dim_v + e)] * f.o[std::size_t(i * d.head_dim_v + e)];
        }
        for (std::int64_t j = 0; j < sp.len_k; ++j) {
          const double pij = f.p[std::size_t(i) * nk + std::size_t(j)];
          if (pij == 0.0) continue;
          double dp = 0.0;
          for (std::int64_t e = 0; e < d.head_dim_v; ++e) {
            const double g = dout[std::size_t(i * d.head_dim_v + e)];
            dp += g * f.v[std::size_t(j * d.head_dim_v + e)];
            dv[std::size_t(j * d.head_dim_v + e)] += pij * g;
          }
          double ds = pij * (dp - di);  // gradient w.r.t. the final score
          if (softcap > 0) {
            const double t = f.tanh_value[std::size_t(i) * nk + std::size_t(j)];
            ds *= 1.0 - t * t;  // d(cap * tanh(x / cap)) / dx
          }
          ds *= double(d.scale);  // the score was scale * q.k
          for (std::int64_t e = 0; e < d.head_dim; ++e) {
            dq[std::size_t(i * d.head_dim + e)] += ds * f.k[std::size_t(j * d.head_dim + e)];
            dk[std::size_t(j * d.head_dim + e)] += ds * f.q[std::size_t(i * d.head_dim + e)];
          }
        }
      }
      scatter(args.dq, ldq, b, sp.q_start, sp.len_q, h, d.head_dim, dq);
    }
    scatter(args.dk, ldk, b, sp.k_start, sp.len_k, hk, d.head_dim, dk);
    scatter(args.dv, ldv, b, sp.k_start, sp.len_k, hk, d.head_dim_v, dv);
  });
}

}  // namespace flashkit::cpu
