#include "rotary_case.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <sstream>

namespace flashkit::testing {

std::string RotarySpec::name() const {
  std::ostringstream s;
  s << dtype_name(dtype) << " tables=" << dtype_name(table_dtype) << " d=" << head_dim
    << " rotary=" << rotary_dim << " heads=" << heads << (packed ? " packed" : " batch")
    << " positions=" << int(positions) << (interleaved ? " interleaved" : "")
    << (conjugate ? " conjugate" : "");
  return s.str();
}

std::vector<std::int64_t> RotaryCase::shape() const {
  if (spec.packed) return {std::int64_t(row_pos.size()), spec.heads, spec.head_dim};
  return {spec.batch, spec.seqlen, spec.heads, spec.head_dim};
}

RotaryCase make_rotary_case(const RotarySpec& s) {
  RotaryCase c;
  c.spec = s;
  std::mt19937 rng(s.seed);
  const std::int64_t half = s.rotary_dim / 2;
  std::vector<double> cos_v, sin_v;
  for (std::int64_t p = 0; p < s.max_positions; ++p) {
    for (std::int64_t k = 0; k < half; ++k) {
      const double angle = double(p) * std::pow(10000.0, -2.0 * double(k) / double(s.rotary_dim));
      cos_v.push_back(std::cos(angle));
      sin_v.push_back(std::sin(angle));
    }
  }
  c.cos = HostTensor(s.table_dtype, {s.max_positions, half});
  c.sin = HostTensor(s.table_dtype, {s.max_positions, half});
  c.cos.set_values(cos_v);
  c.sin.set_values(sin_v);

  // Rows and the sequences they belong to.
  std::vector<std::int64_t> row_seq, row_token;
  if (s.packed) {
    std::vector<double> cu{0.0};
    for (std::int64_t b = 0; b < s.batch; ++b) {
      for (std::int64_t i = 0; i < s.lens[std::size_t(b)]; ++i) {
        row_seq.push_back(b);
        row_token.push_back(i);
      }
      cu.push_back(cu.back() + double(s.lens[std::size_t(b)]));
    }
    for (std::int64_t i = 0; i < s.extra_rows; ++i) {
      row_seq.push_back(-1);
      row_token.push_back(0);
    }
    c.cu_seqlens = HostTensor(DType::i32, {s.batch + 1});
    c.cu_seqlens.set_values(cu);
  } else {
    for (std::int64_t b = 0; b < s.batch; ++b) {
      for (std::int64_t i = 0; i < s.seqlen; ++i) {
        row_seq.push_back(b);
        row_token.push_back(i);
      }
    }
  }
  const auto rows = std::int64_t(row_seq.size());
  c.row_pos.assign(std::size_t(rows), -1);
  std::uniform_int_distribution<std::int64_t> any_position(0, s.max_positions - 1);
  std::vector<double> offsets, ids(std::size_t(rows), 0.0);
  std::int64_t longest = s.seqlen;
  if (s.packed) longest = *std::max_element(s.lens.begin(), s.lens.end());
  for (std::int64_t b = 0; b < s.batch; ++b) {
    offsets.push_back(
        double(std::uniform_int_distribution<std::int64_t>(0, s.max_positions - longest)(rng)));
  }
  std::vector<double> one_each(std::size_t(s.batch));
  for (auto& p : one_each) p = double(any_position(rng));
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t b = row_seq[std::size_t(r)], i = row_token[std::size_t(r)];
    ids[std::size_t(r)] = double(any_position(rng));
    if (b < 0) continue;
    switch (s.positions) {
      case RotaryPositionKind::index:
        c.row_pos[std::size_t(r)] = i;
        break;
      case RotaryPositionKind::offsets:
        c.row_pos[std::size_t(r)] = std::int64_t(offsets[std::size_t(b)]) + i;
        break;
      case RotaryPositionKind::ids:
        c.row_pos[std::size_t(r)] = std::int64_t(ids[std::size_t(r)]);
        break;
      case RotaryPositionKind::one_per_sequence:
        c.row_pos[std::size_t(r)] = std::int64_t(one_each[std::size_t(b)]);
        break;
    }
  }
  if (s.positions == RotaryPositionKind::offsets) {
    c.seqlen_offsets = HostTensor(DType::i32, {s.batch});
    c.seqlen_offsets.set_values(offsets);
  } else if (s.positions == RotaryPositionKind::ids) {
    c.position_ids =
        s.packed ? HostTensor(DType::i32, {rows}) : HostTensor(DType::i32, {s.batch, s.seqlen});
    c.position_ids.set_values(ids);
    c.position_ids_view = c.position_ids;
  } else if (s.positions == RotaryPositionKind::one_per_sequence) {
    c.position_ids = HostTensor(DType::i32, {s.batch});
    c.position_ids.set_values(one_each);
    c.position_ids_view =
        Tensor(c.position_ids.view().data(), DType::i32, {s.batch, s.seqlen}, {1, 0});
  }

  c.x = HostTensor(s.dtype, c.shape());
  c.x.fill_random(rng);
  return c;
}

RotaryArgs RotaryCase::args(const Tensor& out) const {
  RotaryArgs a;
  a.x = x;
  a.out = out;
  a.cos = cos;
  a.sin = sin;
  if (spec.packed) a.cu_seqlens = cu_seqlens;
  if (spec.positions == RotaryPositionKind::offsets) a.seqlen_offsets = seqlen_offsets;
  if (position_ids_view.defined()) a.position_ids = position_ids_view;
  a.interleaved = spec.interleaved;
  a.conjugate = spec.conjugate;
  return a;
}

std::vector<double> RotaryCase::expected(const std::vector<double>& unwritten) const {
  const RotarySpec& s = spec;
  const std::vector<double> xv = x.values(), cv = cos.values(), sv = sin.values();
  std::vector<double> y = xv;
  const std::int64_t half = s.rotary_dim / 2, d = s.head_dim;
  for (std::size_t r = 0; r < row_pos.size(); ++r) {
    for (std::int64_t h = 0; h < s.heads; ++h) {
      const std::size_t base = (r * std::size_t(s.heads) + std::size_t(h)) * std::size_t(d);
      if (row_pos[r] < 0) {
        std::copy(unwritten.begin() + std::ptrdiff_t(base),
                  unwritten.begin() + std::ptrdiff_t(base) + d, y.begin() + std::ptrdiff_t(base));
        continue;
      }
      for (std::int64_t k = 0; k < half; ++k) {
        const std::size_t e1 = base + std::size_t(s.interleaved ? 2 * k : k);
        const std::size_t e2 = base + std::size_t(s.interleaved ? 2 * k + 1 : k + half);
        const double c = cv[std::size_t(row_pos[r] * half + k)];
        const double sn = (s.conjugate ? -1.0 : 1.0) * sv[std::size_t(row_pos[r] * half + k)];
        y[e1] = xv[e1] * c - xv[e2] * sn;
        y[e2] = xv[e1] * sn + xv[e2] * c;
      }
    }
  }
  return y;
}

double rounding_units(const std::vector<double>& got, const std::vector<double>& want,
                      DType dtype) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  const double eps = dtype == DType::bf16 ? 0x1p-8 : dtype == DType::f16 ? 0x1p-11 : 0x1p-23;
  double worst = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]) && std::isnan(got[i])) continue;  // an unwritten, poisoned element
    const double err = std::fabs(got[i] - want[i]);
    if (!(err <= std::numeric_limits<double>::max()))
      return std::numeric_limits<double>::infinity();
    worst = std::max(worst, err / (eps * std::fabs(want[i]) + 1e-6));
  }
  return worst;
}

}  // namespace flashkit::testing
