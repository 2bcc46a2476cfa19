#include "cascade_case.hpp"

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

namespace flashkit::testing {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

PagedSpec plain_spec(const CascadeSpec& s) {
  PagedSpec p;
  p.kv_dtype = p.q_dtype = s.dtype;
  p.page_size = s.page_size;
  p.heads_kv = s.heads_kv;
  p.heads_q = s.heads_kv * s.group;
  p.head_dim = s.head_dim;
  // Suffixes: only the new tokens, a few more, several pages' worth, then lengths spread over
  // 0..96 tokens past the queries.
  const std::int64_t firsts[] = {s.q_len, s.q_len + 6, std::max<std::int64_t>(45, s.q_len)};
  p.seq_lens.clear();
  for (std::int64_t b = 0; b < s.batch; ++b) {
    p.seq_lens.push_back(s.prefix + (b < 3 ? firsts[b] : s.q_len + (b * 37) % 97));
  }
  p.q_lens.assign(std::size_t(s.batch), s.q_len);
  p.causal = s.causal;
  p.softcap = s.softcap;
  p.softmax_scale = s.softmax_scale;
  p.seed = std::uint32_t(s.page_size * 131 + s.group * 17 + s.q_len * 5 + s.prefix);
  return p;
}

std::int64_t div_up(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

std::string CascadeSpec::name() const {
  return std::string(dtype_name(dtype)) + " page=" + std::to_string(page_size) +
         " gqa=" + std::to_string(group) + " q_len=" + std::to_string(q_len) +
         " prefix=" + std::to_string(prefix) + " batch=" + std::to_string(batch) +
         " d=" + std::to_string(head_dim) + (causal ? " causal" : "") +
         (softcap > 0 ? " softcap" : "");
}

CascadeAttentionArgs CascadeCase::args(const Tensor& out, const Tensor& lse,
                                       const Tensor& ws) const {
  CascadeAttentionArgs a;
  a.q = plain.q;
  a.shared = plain.kv();
  a.shared.block_table = shared_table;
  a.shared.seq_lens = shared_len;
  a.suffix.k_pages = suffix_k;
  a.suffix.v_pages = suffix_v;
  a.suffix.block_table = suffix_table;
  a.suffix.seq_lens = suffix_lens;
  a.out = out;
  a.lse = lse;
  a.workspace = ws;
  a.softmax_scale = spec.softmax_scale;
  a.mask.causal = spec.causal;
  a.mask.softcap = spec.softcap;
  return a;
}

namespace {

// Every request's first `prefix` tokens become request 0's.
void share_prefix(PagedCase& c, std::int64_t prefix) {
  const std::int64_t ps = c.spec.page_size, hk = c.spec.heads_kv, d = c.spec.head_dim;
  for (HostTensor* pages : {&c.k_pages, &c.v_pages}) {
    std::vector<double> v = pages->values();
    auto at = [&](std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t e) -> double& {
      const std::int64_t page = c.pages[std::size_t(b)][std::size_t(t / ps)];
      return v[std::size_t(((page * ps + t % ps) * hk + h) * d + e)];
    };
    for (std::int64_t b = 1; b < c.spec.batch(); ++b) {
      for (std::int64_t t = 0; t < prefix; ++t) {
        for (std::int64_t h = 0; h < hk; ++h) {
          for (std::int64_t e = 0; e < d; ++e) at(b, t, h, e) = at(0, t, h, e);
        }
      }
    }
    pages->set_values(v);
  }
}

// The suffixes in a pool of their own, pages handed out in reverse, NaN where no token is.
void build_suffix_pool(CascadeCase& c) {
  const PagedCase& p = c.plain;
  const std::int64_t ps = p.spec.page_size, hk = p.spec.heads_kv, d = p.spec.head_dim;
  std::int64_t per_request = 0;
  for (std::int64_t b = 0; b < c.batch(); ++b) {
    per_request = std::max(per_request, div_up(c.suffix_len(b), ps));
  }
  const std::int64_t num_pages = c.batch() * per_request;
  std::vector<double> k(std::size_t(num_pages * ps * hk * d), kNaN), v = k, table, lens;
  for (std::int64_t b = 0; b < c.batch(); ++b) {
    for (std::int64_t i = 0; i < per_request; ++i) {
      table.push_back(double(num_pages - 1 - (b * per_request + i)));
    }
    lens.push_back(double(c.suffix_len(b)));
    for (std::int64_t t = 0; t < c.suffix_len(b); ++t) {
      const std::int64_t page = num_pages - 1 - (b * per_request + t / ps);
      for (std::int64_t h = 0; h < hk; ++h) {
        for (std::int64_t e = 0; e < d; ++e) {
          const std::size_t i = std::size_t(((page * ps + t % ps) * hk + h) * d + e);
          k[i] = p.k_at(b, c.spec.prefix + t, h, e);
          v[i] = p.v_at(b, c.spec.prefix + t, h, e);
        }
      }
    }
  }
  c.suffix_k = HostTensor(p.spec.kv_dtype, {num_pages, ps, hk, d});
  c.suffix_v = HostTensor(p.spec.kv_dtype, {num_pages, ps, hk, d});
  c.suffix_k.set_values(k);
  c.suffix_v.set_values(v);
  c.suffix_table = HostTensor(DType::i32, {c.batch(), per_request});
  c.suffix_table.set_values(table);
  c.suffix_lens = HostTensor(DType::i32, {c.batch()});
  c.suffix_lens.set_values(lens);
}

}  // namespace

CascadeCase make_cascade_case(const CascadeSpec& spec) {
  CascadeCase c{spec, make_paged_case(plain_spec(spec)), {}, {}, {}, {}, {}, {}};
  share_prefix(c.plain, spec.prefix);
  const std::int64_t ps = spec.page_size;
  std::vector<double> row(std::size_t(c.plain.max_pages), -1.0);
  for (std::int64_t i = 0; i < div_up(spec.prefix, ps); ++i) {
    row[std::size_t(i)] = c.plain.pages[0][std::size_t(i)];
  }
  c.shared_table = HostTensor(DType::i32, {1, c.plain.max_pages});
  c.shared_table.set_values(row);
  c.shared_len = HostTensor(DType::i32, {1});
  c.shared_len.set_values({double(spec.prefix)});
  build_suffix_pool(c);
  return c;
}

HostTensor make_workspace(const CascadeCase& c) {
  const PagedSpec& s = c.plain.spec;
  HostTensor ws(DType::f32,
                {cascade_workspace_elems(c.batch(), c.spec.q_len, s.heads_q, s.head_dim)});
  ws.poison();
  return ws;
}

// lse [batch, heads, q_len] -> [heads, batch * q_len], run_paged's order.
std::vector<double> packed_lse(const std::vector<double>& lse, std::int64_t batch,
                               std::int64_t heads, std::int64_t q_len) {
  std::vector<double> packed(lse.size());
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t h = 0; h < heads; ++h) {
      for (std::int64_t i = 0; i < q_len; ++i) {
        packed[std::size_t((h * batch + b) * q_len + i)] =
            lse[std::size_t((b * heads + h) * q_len + i)];
      }
    }
  }
  return packed;
}

}  // namespace flashkit::testing
