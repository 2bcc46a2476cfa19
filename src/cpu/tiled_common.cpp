#include "cpu/tiled_common.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <new>
#include <utility>

#include "core/numeric.hpp"
#include "core/softmax_state.hpp"
#include "cpu/tiled_gemm.hpp"
#include "cpu/tiled_math.hpp"

namespace flashkit::cpu::tiled {

namespace {

constexpr std::align_val_t kAlignment{64};
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

}  // namespace

TileShape tile_shape(const core::ProblemDims& dims, std::int64_t target_rows) {
  TileShape s{};
  s.group = dims.group();
  // floor, not ceil: 128 / 3 -> 42 tokens fill 126 of 128 rows, where 43 would need 160.
  s.tokens = std::max<std::int64_t>(1, target_rows / s.group);
  s.tokens = std::min(s.tokens, std::max<std::int64_t>(1, dims.seqlen_q));
  s.rows = round_up(s.group * s.tokens, kMicroCols);
  s.d = dims.head_dim;
  s.dv = dims.head_dim_v;
  s.d_pad = round_up(s.d, kMicroCols);
  s.dv_pad = round_up(s.dv, kMicroCols);
  return s;
}

TaskGrid::TaskGrid(std::int64_t heads_kv, std::vector<std::int64_t> units_per_sequence)
    : heads_kv_(heads_kv), units_(std::move(units_per_sequence)), offsets_{0} {
  for (const std::int64_t u : units_) offsets_.push_back(offsets_.back() + heads_kv_ * u);
}

TaskGrid::Task TaskGrid::at(std::int64_t index) const {
  // The sequence whose range [offsets_[b], offsets_[b + 1]) holds index.
  const auto it = std::upper_bound(offsets_.begin(), offsets_.end(), index);
  const auto b = std::int64_t(it - offsets_.begin()) - 1;
  const std::int64_t rest = index - offsets_[std::size_t(b)];
  const std::int64_t units = units_[std::size_t(b)];
  return {b, rest / units, rest % units};
}

std::int64_t TaskGrid::index(std::int64_t b, std::int64_t hk, std::int64_t unit) const {
  return offsets_[std::size_t(b)] + hk * units_[std::size_t(b)] + unit;
}

std::vector<std::int64_t> query_tiles_per_sequence(const std::vector<core::SeqSpan>& spans,
                                                   const TileShape& shape) {
  std::vector<std::int64_t> tiles;
  tiles.reserve(spans.size());
  for (const auto& sp : spans) tiles.push_back(ceil_div(sp.len_q, shape.tokens));
  return tiles;
}

QueryTile query_tile(const core::SeqSpan& span, std::int64_t b, std::int64_t hk,
                     std::int64_t tile_index, const TileShape& shape) {
  const std::int64_t t0 = tile_index * shape.tokens;
  return {b, hk, t0, std::min(shape.tokens, span.len_q - t0), span};
}

void Scratch::Free::operator()(float* p) const {
  ::operator delete[](p, kAlignment);
}

float* Scratch::floats(std::size_t n) {
  if (n > size_) {
    data_.reset(static_cast<float*>(::operator new[](n * sizeof(float), kAlignment)));
    size_ = n;
  }
  return data_.get();
}

HeadRows head_rows(const Tensor& t, const core::TokenLayout& lay, std::int64_t b,
                   std::int64_t start, std::int64_t h) {
  const std::int64_t offset = core::element_offset(lay, b, start, 0, h);
  char* base = static_cast<char*>(t.data()) + offset * std::int64_t(dtype_size(t.dtype()));
  return {base, t.dtype(), lay.token_stride};
}

void load_row(const HeadRows& src, std::int64_t t, std::int64_t dim, float* __restrict__ dst) {
  const std::int64_t offset = t * src.token_stride;
  switch (src.dtype) {
    case DType::f32: {
      const float* __restrict__ x = reinterpret_cast<const float*>(src.base) + offset;
      for (std::int64_t e = 0; e < dim; ++e) dst[e] = x[e];
      return;
    }
    case DType::f16: {
      const std::uint16_t* __restrict__ x =
          reinterpret_cast<const std::uint16_t*>(src.base) + offset;
      for (std::int64_t e = 0; e < dim; ++e) dst[e] = f16_bits_to_float(x[e]);
      return;
    }
    case DType::bf16: {
      const std::uint16_t* __restrict__ x =
          reinterpret_cast<const std::uint16_t*>(src.base) + offset;
      for (std::int64_t e = 0; e < dim; ++e) dst[e] = bf16_bits_to_float(x[e]);
      return;
    }
    case DType::f64: {  // only `out` read by the backward: f64 inputs go to the oracle
      const double* __restrict__ x = reinterpret_cast<const double*>(src.base) + offset;
      for (std::int64_t e = 0; e < dim; ++e) dst[e] = float(x[e]);
      return;
    }
    default:
      return;  // validation admits no other dtype here
  }
}

void store_row(const HeadRows& dst, std::int64_t t, std::int64_t dim, const float* __restrict__ src,
               float mul) {
  const std::int64_t offset = t * dst.token_stride;
  switch (dst.dtype) {
    case DType::f32: {
      float* __restrict__ y = reinterpret_cast<float*>(dst.base) + offset;
      for (std::int64_t e = 0; e < dim; ++e) y[e] = src[e] * mul;
      return;
    }
    case DType::f16: {
      std::uint16_t* __restrict__ y = reinterpret_cast<std::uint16_t*>(dst.base) + offset;
      for (std::int64_t e = 0; e < dim; ++e) y[e] = core::float_to_f16(src[e] * mul);
      return;
    }
    case DType::bf16: {
      std::uint16_t* __restrict__ y = reinterpret_cast<std::uint16_t*>(dst.base) + offset;
      for (std::int64_t e = 0; e < dim; ++e) y[e] = core::float_to_bf16(src[e] * mul);
      return;
    }
    case DType::f64: {  // an f64 output of f32/f16/bf16 inputs
      double* __restrict__ y = reinterpret_cast<double*>(dst.base) + offset;
      for (std::int64_t e = 0; e < dim; ++e) y[e] = double(src[e] * mul);
      return;
    }
    default:
      return;
  }
}

void load_rows(const HeadRows& src, std::int64_t t0, std::int64_t n, std::int64_t dim,
               std::int64_t rows, float* dst, std::int64_t ld) {
  for (std::int64_t i = 0; i < n; ++i) {
    float* row = dst + i * ld;
    load_row(src, t0 + i, dim, row);
    std::fill(row + dim, row + ld, 0.0f);
  }
  std::fill(dst + n * ld, dst + rows * ld, 0.0f);
}

void load_query_tile(const Tensor& t, const core::TokenLayout& lay, const QueryTile& tile,
                     const TileShape& shape, std::int64_t dim, Layout layout, float* dst,
                     std::int64_t ld) {
  const std::int64_t extent = layout == Layout::row_major ? shape.rows * ld : dim * shape.rows;
  std::fill(dst, dst + extent, 0.0f);
  float row[512];  // one converted row; head dims are at most 512 on the CPU (cpu_backend.cpp)
  for (std::int64_t g = 0; g < shape.group; ++g) {
    const HeadRows src = head_rows(t, lay, tile.b, tile.span.q_start, tile.hk * shape.group + g);
    for (std::int64_t i = 0; i < tile.ntok; ++i) {
      const std::int64_t r = g * shape.tokens + i;
      if (layout == Layout::row_major) {
        load_row(src, tile.t0 + i, dim, dst + r * ld);
        continue;
      }
      load_row(src, tile.t0 + i, dim, row);
      for (std::int64_t e = 0; e < dim; ++e) dst[e * shape.rows + r] = row[e];
    }
  }
}

float alibi_slope(const Tensor& slopes, std::int64_t b, std::int64_t h) {
  if (!slopes.defined()) return 0.0f;
  const std::int64_t offset =
      slopes.rank() == 1 ? h * slopes.stride(0) : b * slopes.stride(0) + h * slopes.stride(1);
  return slopes.data_as<const float>()[offset];
}

void build_tile_mask(TileMask& m, const core::ProblemDims& dims, const Tensor& slopes,
                     const QueryTile& tile, const TileShape& shape) {
  const auto rows = std::size_t(shape.rows);
  m.slope2.assign(rows, 0.0f);
  m.diag.assign(rows, 0.0f);
  m.lo.assign(rows, 0);
  m.hi.assign(rows, -1);
  const std::int64_t len_k = tile.span.len_k;
  const std::int64_t shift = core::diagonal_shift(dims.mask, tile.span.len_q, len_k);
  for (std::int64_t g = 0; g < shape.group; ++g) {
    const float slope2 =
        alibi_slope(slopes, tile.b, tile.hk * shape.group + g) * float(core::kLog2e);
    for (std::int64_t i = 0; i < tile.ntok; ++i) {
      const auto r = std::size_t(g * shape.tokens + i);
      const std::int64_t diag = tile.t0 + i + shift;
      const core::KeyBand band = core::key_band(dims.mask, diag, len_k);
      m.slope2[r] = slope2;
      m.diag[r] = float(diag);
      m.lo[r] = band.lo;
      m.hi[r] = band.hi;
    }
  }
  m.first = core::key_band(dims.mask, tile.t0 + shift, len_k);
  m.last = core::key_band(dims.mask, tile.t0 + tile.ntok - 1 + shift, len_k);
}

BlockKind classify_block(const core::MaskRule& rule, const TileMask& m, std::int64_t j0,
                         std::int64_t j1) {
  // Bands only move right as the diagonal grows (lo and hi are non-decreasing in it), so the
  // rows' union is [first.lo, last.hi] and their intersection [last.lo, first.hi].
  if (j1 <= rule.prefix_len) return BlockKind::full;
  const std::int64_t a = std::max(j0, rule.prefix_len);  // first key the prefix does not cover
  if (m.last.lo <= a && m.first.hi >= j1 - 1) return BlockKind::full;
  const bool meets_band = j0 <= m.last.hi && j1 - 1 >= m.first.lo && m.first.lo <= m.last.hi;
  return (meets_band || j0 < rule.prefix_len) ? BlockKind::cut : BlockKind::skip;
}

ScoreRule score_rule(const core::ProblemDims& dims, bool alibi) {
  const float softcap = dims.mask.softcap;
  ScoreRule r{};
  r.dot_scale = softcap > 0 ? dims.scale / softcap : dims.scale * float(core::kLog2e);
  r.cap_log2 = softcap > 0 ? softcap * float(core::kLog2e) : 0.0f;
  r.alibi = alibi;
  r.prefix_len = dims.mask.prefix_len;
  return r;
}

namespace {

void scale_row(float* __restrict__ s, std::int64_t n, const ScoreRule& rule,
               float* __restrict__ tanh_out) {
  if (rule.cap_log2 > 0) {
    for (std::int64_t i = 0; i < n; ++i) {
      const float t = tanh_fast(s[i] * rule.dot_scale);
      tanh_out[i] = t;
      s[i] = rule.cap_log2 * t;
    }
    return;
  }
  for (std::int64_t i = 0; i < n; ++i) s[i] *= rule.dot_scale;
}

void add_alibi_row(float* __restrict__ s, std::int64_t n, std::int64_t key, const TileMask& m) {
  const float* __restrict__ slope2 = m.slope2.data();
  const float* __restrict__ diag = m.diag.data();
  const float j = float(key);
  for (std::int64_t i = 0; i < n; ++i) s[i] -= slope2[i] * std::fabs(diag[i] - j);
}

void mask_row(float* __restrict__ s, std::int64_t n, std::int64_t key, const TileMask& m) {
  const std::int64_t* __restrict__ lo = m.lo.data();
  const std::int64_t* __restrict__ hi = m.hi.data();
  for (std::int64_t i = 0; i < n; ++i) s[i] = (key >= lo[i] && key <= hi[i]) ? s[i] : kNegInf;
}

}  // namespace

void score_tile(float* st, std::int64_t ld, std::int64_t nk, std::int64_t j0, const ScoreRule& rule,
                const TileMask& m, BlockKind kind, float* tanh_out) {
  for (std::int64_t j = 0; j < nk; ++j) {
    float* row = st + j * ld;
    scale_row(row, ld, rule, tanh_out ? tanh_out + j * ld : nullptr);
    if (rule.alibi) add_alibi_row(row, ld, j0 + j, m);
    if (kind == BlockKind::cut && j0 + j >= rule.prefix_len) mask_row(row, ld, j0 + j, m);
  }
}

}  // namespace flashkit::cpu::tiled
