#include "mla_case.hpp"

#include <gtest/gtest.h>

#include <limits>
#include <numeric>
#include <random>

namespace flashkit::testing {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double round_to(DType dtype, double x) {
  HostTensor t(dtype == DType::e4m3 ? DType::f32 : dtype, {1});
  t.set_values({x});
  return t.at(0);
}

}  // namespace

MlaCase make_mla_case(const MlaShape& s) {
  MlaCase c;
  c.s = s;
  std::mt19937 rng(s.seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  const double w_scale = 1.0 / std::sqrt(double(s.latent));  // keeps scores O(1)
  c.w_uk.resize(std::size_t(s.heads * s.nope * s.latent));
  c.w_uv.resize(std::size_t(s.heads * s.dv * s.latent));
  for (auto& w : c.w_uk) w = u(rng) * w_scale;
  for (auto& w : c.w_uv) w = u(rng) * w_scale;

  const DType store = s.dtype == DType::e4m3 ? DType::f32 : s.dtype;
  for (std::int64_t b = 0; b < s.batch(); ++b) {
    std::vector<double> r(std::size_t(s.seq_lens[std::size_t(b)] * s.width()));
    for (auto& x : r) x = round_to(store, u(rng));
    c.rows.push_back(std::move(r));
    const std::int64_t nq = s.q_lens[std::size_t(b)];
    std::vector<double> qn(std::size_t(nq * s.heads * s.nope)),
        qr(std::size_t(nq * s.heads * s.rope));
    for (auto& x : qn) x = u(rng);
    for (auto& x : qr) x = round_to(store, u(rng));
    c.q_nope.push_back(std::move(qn));
    c.q_rope.push_back(std::move(qr));
    c.total_q += nq;
  }

  // Pages: the next ids of a shuffled pool, 2 left unused; a spare table column of -1.
  std::int64_t needed = 0;
  for (auto len : s.seq_lens) {
    const std::int64_t n = (len + s.page_size - 1) / s.page_size;
    needed += n;
    c.max_pages = std::max(c.max_pages, n);
  }
  c.max_pages += 1;
  c.num_pages = needed + 2;
  std::vector<std::int32_t> pool(static_cast<std::size_t>(c.num_pages));
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  std::vector<double> page_values(std::size_t(c.num_pages * s.page_size * s.width()), kNaN);
  std::vector<double> table(std::size_t(s.batch() * c.max_pages), -1.0), lens;
  std::size_t next = 0;
  c.page_ids.resize(std::size_t(s.batch()));
  for (std::int64_t b = 0; b < s.batch(); ++b) {
    const std::int64_t len = s.seq_lens[std::size_t(b)];
    for (std::int64_t t = 0; t < len; ++t) {
      if (t % s.page_size == 0) {
        table[std::size_t(b * c.max_pages + t / s.page_size)] = pool[next];
        c.page_ids[std::size_t(b)].push_back(pool[next++]);
      }
      const std::int64_t page = c.page_ids[std::size_t(b)].back();
      for (std::int64_t e = 0; e < s.width(); ++e) {
        page_values[std::size_t((page * s.page_size + t % s.page_size) * s.width() + e)] =
            c.rows[std::size_t(b)][std::size_t(t * s.width() + e)];
      }
    }
    lens.push_back(double(len));
  }
  c.block_table = HostTensor(DType::i32, {s.batch(), c.max_pages});
  c.block_table.set_values(table);
  c.seq_lens = HostTensor(DType::i32, {s.batch()});
  c.seq_lens.set_values(lens);
  c.pages = HostTensor(s.dtype, {c.num_pages, s.page_size, s.width()});
  if (s.dtype == DType::e4m3) {
    // Stored through mla_append below, which quantises with these scales.
    c.scale = HostTensor(DType::f32, {c.num_pages});
    std::vector<double> scales(std::size_t(c.num_pages));
    for (auto& x : scales) x = 1.0 / 448.0 * (1.0 + 0.5 * (u(rng) + 1.0));
    c.scale.set_values(scales);
    c.pages.set_values(std::vector<double>(page_values.size(), 0.0));
  } else {
    c.pages.set_values(page_values);
  }

  // Absorbed queries: q_latent[h] = W_UK[h]^T q_nope[h], then q_rope.
  const std::vector<std::int64_t> q_shape =
      s.packed ? std::vector<std::int64_t>{c.total_q, s.heads, s.width()}
               : std::vector<std::int64_t>{s.batch(), s.q_lens[0], s.heads, s.width()};
  const DType q_dtype = s.dtype == DType::e4m3 ? DType::f32 : s.dtype;
  c.q = HostTensor(q_dtype, q_shape);
  std::vector<double> qv(std::size_t(c.total_q * s.heads * s.width()));
  for (std::int64_t b = 0; b < s.batch(); ++b) {
    for (std::int64_t i = 0; i < s.q_lens[std::size_t(b)]; ++i) {
      for (std::int64_t h = 0; h < s.heads; ++h) {
        double* dst = qv.data() + (c.q_row(b, i) * s.heads + h) * s.width();
        const double* qn = c.q_nope[std::size_t(b)].data() + (i * s.heads + h) * s.nope;
        for (std::int64_t l = 0; l < s.latent; ++l) {
          double x = 0.0;
          for (std::int64_t n = 0; n < s.nope; ++n) {
            x += c.w_uk[std::size_t((h * s.nope + n) * s.latent + l)] * qn[n];
          }
          dst[l] = x;
        }
        const double* qr = c.q_rope[std::size_t(b)].data() + (i * s.heads + h) * s.rope;
        std::copy(qr, qr + s.rope, dst + s.latent);
      }
    }
  }
  c.q.set_values(qv);
  if (s.packed) {
    c.cu_seqlens_q = HostTensor(DType::i32, {s.batch() + 1});
    std::vector<double> cu{0.0};
    for (auto n : s.q_lens) cu.push_back(cu.back() + double(n));
    c.cu_seqlens_q.set_values(cu);
  }
  return c;
}

void append_all(MlaCase& c) {
  const MlaShape& s = c.s;
  for (std::int64_t b = 0; b < s.batch(); ++b) {
    const std::int64_t len = s.seq_lens[std::size_t(b)];
    HostTensor rows(DType::f32, {1, len, s.width()}), start(DType::i32, {1});
    rows.set_values(c.rows[std::size_t(b)]);
    start.set_values({0.0});
    HostTensor table(DType::i32, {1, c.max_pages});
    std::vector<double> ids(std::size_t(c.max_pages), -1.0);
    for (std::size_t p = 0; p < c.page_ids[std::size_t(b)].size(); ++p) {
      ids[p] = c.page_ids[std::size_t(b)][p];
    }
    table.set_values(ids);
    MlaAppendArgs a;
    a.rows = rows;
    a.start_pos = start;
    a.cache = c.cache();
    a.cache.block_table = table;
    mla_append(a);
    const std::vector<double> pages = c.pages.values(), scales = c.scale.values();
    for (std::int64_t t = 0; t < len; ++t) {
      const std::int64_t page = c.page_ids[std::size_t(b)][std::size_t(t / s.page_size)];
      for (std::int64_t e = 0; e < s.width(); ++e) {
        double& x = c.rows[std::size_t(b)][std::size_t(t * s.width() + e)];
        const double scale = scales[std::size_t(page)];
        const double stored =
            pages[std::size_t((page * s.page_size + t % s.page_size) * s.width() + e)] * scale;
        ASSERT_LE(std::fabs(stored - x), std::fabs(x) / 16.0 + scale / 1024.0)
            << "sequence " << b << " token " << t << " column " << e;
        x = stored;
      }
    }
  }
}

std::vector<double> expanded_oracle(const MlaCase& c) {
  const MlaShape& s = c.s;
  std::int64_t total_k = 0;
  for (auto len : s.seq_lens) total_k += len;
  const std::int64_t dqk = s.nope + s.rope;
  HostTensor q(DType::f64, {c.total_q, s.heads, dqk}), k(DType::f64, {total_k, s.heads, dqk});
  HostTensor v(DType::f64, {total_k, s.heads, s.dv}), out(DType::f64, {c.total_q, s.heads, s.dv});
  HostTensor cu_q(DType::i32, {s.batch() + 1}), cu_k(DType::i32, {s.batch() + 1});
  std::vector<double> qv, kv, vv, cq{0.0}, ck{0.0};
  for (std::int64_t b = 0; b < s.batch(); ++b) {
    for (std::int64_t i = 0; i < s.q_lens[std::size_t(b)]; ++i) {
      for (std::int64_t h = 0; h < s.heads; ++h) {
        const double* qn = c.q_nope[std::size_t(b)].data() + (i * s.heads + h) * s.nope;
        const double* qr = c.q_rope[std::size_t(b)].data() + (i * s.heads + h) * s.rope;
        qv.insert(qv.end(), qn, qn + s.nope);
        qv.insert(qv.end(), qr, qr + s.rope);
      }
    }
    for (std::int64_t t = 0; t < s.seq_lens[std::size_t(b)]; ++t) {
      const double* row = c.rows[std::size_t(b)].data() + t * s.width();
      for (std::int64_t h = 0; h < s.heads; ++h) {
        for (std::int64_t n = 0; n < s.nope; ++n) {
          double x = 0.0;
          for (std::int64_t l = 0; l < s.latent; ++l) {
            x += c.w_uk[std::size_t((h * s.nope + n) * s.latent + l)] * row[l];
          }
          kv.push_back(x);
        }
        kv.insert(kv.end(), row + s.latent, row + s.width());
        for (std::int64_t e = 0; e < s.dv; ++e) {
          double x = 0.0;
          for (std::int64_t l = 0; l < s.latent; ++l) {
            x += c.w_uv[std::size_t((h * s.dv + e) * s.latent + l)] * row[l];
          }
          vv.push_back(x);
        }
      }
    }
    cq.push_back(cq.back() + double(s.q_lens[std::size_t(b)]));
    ck.push_back(ck.back() + double(s.seq_lens[std::size_t(b)]));
  }
  q.set_values(qv);
  k.set_values(kv);
  v.set_values(vv);
  cu_q.set_values(cq);
  cu_k.set_values(ck);
  AttentionArgs a;
  a.q = q;
  a.k = k;
  a.v = v;
  a.out = out;
  a.softmax_scale = float(s.scale());
  a.mask.causal = s.causal;
  a.varlen.cu_seqlens_q = cu_q;
  a.varlen.cu_seqlens_k = cu_k;
  a.varlen.max_seqlen_q = *std::max_element(s.q_lens.begin(), s.q_lens.end());
  a.varlen.max_seqlen_k = *std::max_element(s.seq_lens.begin(), s.seq_lens.end());
  a.algo = Algo::reference;
  attention_forward(a);
  return out.values();
}

std::vector<double> decode_projected(const MlaCase& c, Algo algo, int splits) {
  const MlaShape& s = c.s;
  HostTensor out(DType::f32, c.out_shape());
  out.poison();
  mla_decode(c.args(out, Tensor(), algo, splits));
  const std::vector<double> lat = out.values();  // packed and batch orders agree: equal q_lens
  std::vector<double> o(std::size_t(c.total_q * s.heads * s.dv));
  for (std::int64_t r = 0; r < c.total_q * s.heads; ++r) {
    const std::int64_t h = r % s.heads;
    for (std::int64_t e = 0; e < s.dv; ++e) {
      double x = 0.0;
      for (std::int64_t l = 0; l < s.latent; ++l) {
        x +=
            c.w_uv[std::size_t((h * s.dv + e) * s.latent + l)] * lat[std::size_t(r * s.latent + l)];
      }
      o[std::size_t(r * s.dv + e)] = x;
    }
  }
  return o;
}

}  // namespace flashkit::testing
