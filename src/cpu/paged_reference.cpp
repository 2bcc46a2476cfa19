// The paged oracle: the fp64 reference (cpu/reference.cpp) with keys read through the block
// table. Plain loops, two passes over each score row: it must be obviously right, since every
// paged kernel (CPU fast path, CUDA decode) is judged against it.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/numeric.hpp"
#include "cpu/paged_backend.hpp"
#include "cpu/parallel.hpp"
#include "cpu/tiled_common.hpp"

namespace flashkit::cpu {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Tokens [0, len) of sequence b, KV head h, dequantised: [len, dim] row-major.
std::vector<double> gather(const paged::PageRows& rows, std::int64_t b, std::int64_t h,
                           std::int64_t len, std::int64_t dim) {
  std::vector<double> m(std::size_t(len * dim));
  for (std::int64_t t = 0; t < len; ++t) {
    const std::int64_t page = rows.page_of(b, t);
    const char* row = rows.row(page, t, h);
    const double scale = rows.scale(page, h);
    for (std::int64_t e = 0; e < dim; ++e) {
      m[std::size_t(t * dim + e)] = core::load_as_double(row, rows.dtype(), e) * scale;
    }
  }
  return m;
}

}  // namespace

void paged_reference(const PagedAttentionArgs& args, const core::PagedDims& d) {
  const auto seqs = paged::sequence_queries(args, d);
  const paged::PageRows k_rows(args.kv.k_pages, args.kv.k_scale, args.kv.block_table);
  const paged::PageRows v_rows(args.kv.v_pages, args.kv.v_scale, args.kv.block_table);
  const auto lq = core::token_layout(args.q, d.varlen_q);
  const auto lo = core::token_layout(args.out, d.varlen_q);
  const bool want_lse = args.lse.defined();
  const auto ll = want_lse ? core::lse_layout(args.lse, d.varlen_q) : core::TokenLayout{};
  const core::MaskRule& rule = d.mask;
  parallel_for(d.batch * d.heads_q, [&](std::int64_t task) {
    const std::int64_t b = task / d.heads_q, h = task % d.heads_q, hk = h / d.group();
    const paged::SeqQueries& s = seqs[std::size_t(b)];
    const auto k = gather(k_rows, b, hk, s.len_k, d.head_dim);
    const auto v = gather(v_rows, b, hk, s.len_k, d.head_dim_v);
    const double slope = tiled::alibi_slope(args.mask.alibi_slopes, b, h);
    const std::int64_t shift = core::diagonal_shift(rule, s.len_q, s.len_k);
    std::vector<double> score(std::size_t(s.len_k)), o(std::size_t(d.head_dim_v));
    for (std::int64_t i = 0; i < s.len_q; ++i) {
      const std::int64_t q_off = core::element_offset(lq, b, s.q_start, i, h);
      const std::int64_t diag = i + shift;
      double m = kNegInf;
      for (std::int64_t j = 0; j < s.len_k; ++j) {
        double& sj = score[std::size_t(j)];
        sj = kNegInf;
        if (!core::key_visible(rule, diag, j, s.len_k)) continue;
        double dot = 0.0;
        for (std::int64_t e = 0; e < d.head_dim; ++e) {
          dot += core::load_as_double(args.q.data(), args.q.dtype(), q_off + e) *
                 k[std::size_t(j * d.head_dim + e)];
        }
        sj = d.scale * dot;
        if (rule.softcap > 0) sj = rule.softcap * std::tanh(sj / rule.softcap);
        sj += core::alibi_bias(slope, diag, j);
        m = std::max(m, sj);
      }
      double l = 0.0;
      std::fill(o.begin(), o.end(), 0.0);
      if (m != kNegInf) {  // a query that sees no key keeps o = 0, lse = -inf
        for (std::int64_t j = 0; j < s.len_k; ++j) l += std::exp(score[std::size_t(j)] - m);
        for (std::int64_t j = 0; j < s.len_k; ++j) {
          const double p = std::exp(score[std::size_t(j)] - m) / l;
          for (std::int64_t e = 0; e < d.head_dim_v; ++e) {
            o[std::size_t(e)] += p * v[std::size_t(j * d.head_dim_v + e)];
          }
        }
      }
      const std::int64_t o_off = core::element_offset(lo, b, s.q_start, i, h);
      for (std::int64_t e = 0; e < d.head_dim_v; ++e) {
        core::store_from_double(args.out.data(), args.out.dtype(), o_off + e, o[std::size_t(e)]);
      }
      if (want_lse) {
        args.lse.data_as<float>()[core::element_offset(ll, b, s.q_start, i, h)] =
            float(m == kNegInf ? kNegInf : m + std::log(l));
      }
    }
  });
}

}  // namespace flashkit::cpu
