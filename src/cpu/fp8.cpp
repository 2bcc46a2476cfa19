// FP8 on the CPU: one task per (batch, head) walks its tokens row by row. quantize_fp8 makes two
// passes over each block of block_size tokens (its max, then the rounding), keeping the block's
// rotated rows in fp32 between them.
#include "cpu/fp8.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/numeric.hpp"
#include "core/problem.hpp"
#include "cpu/parallel.hpp"
#include "cpu/tiled_common.hpp"

namespace flashkit::cpu {

namespace {

// e4m3's largest finite value: a block's max |x| maps onto it.
constexpr float kE4m3Max = 448.0f;

float* scale_at(const Tensor& scale, std::int64_t b, std::int64_t h, std::int64_t block) {
  return scale.data_as<float>() + b * scale.stride(0) + h * scale.stride(1) +
         block * scale.stride(2);
}

// Runs body(b, h) on the pool for every (batch, head) of x [batch, seqlen, heads, d].
template <class Body>
void per_batch_head(const Tensor& x, Body&& body) {
  const std::int64_t heads = x.size(2);
  parallel_for(x.size(0) * heads, [&](std::int64_t task) { body(task / heads, task % heads); });
}

}  // namespace

void hadamard_row(float* row, std::int64_t d) {
  for (std::int64_t len = 1; len < d; len *= 2) {
    for (std::int64_t i = 0; i < d; i += 2 * len) {
      for (std::int64_t j = i; j < i + len; ++j) {
        const float a = row[j], b = row[j + len];
        row[j] = a + b;
        row[j + len] = a - b;
      }
    }
  }
  const float norm = 1.0f / std::sqrt(float(d));
  for (std::int64_t e = 0; e < d; ++e) row[e] *= norm;
}

void quantize_fp8(const QuantizeFp8Args& a) {
  const Tensor& x = a.x;
  const std::int64_t seqlen = x.size(1), d = x.size(3);
  const auto lx = core::token_layout(x, false), lo = core::token_layout(a.out, false);
  per_batch_head(x, [&](std::int64_t b, std::int64_t h) {
    const tiled::HeadRows src = tiled::head_rows(x, lx, b, 0, h);
    auto* dst = static_cast<std::uint8_t*>(a.out.data()) + b * lo.batch_stride + h * lo.head_stride;
    std::vector<float> rows(static_cast<std::size_t>(a.block_size * d));
    for (std::int64_t t0 = 0, block = 0; t0 < seqlen; t0 += a.block_size, ++block) {
      const std::int64_t n = std::min(a.block_size, seqlen - t0);
      float amax = 0.0f;
      for (std::int64_t i = 0; i < n; ++i) {
        float* row = rows.data() + i * d;
        tiled::load_row(src, t0 + i, d, row);
        if (a.hadamard) hadamard_row(row, d);
        for (std::int64_t e = 0; e < d; ++e) amax = std::max(amax, std::fabs(row[e]));
      }
      // An all-zero block keeps scale 1: any scale stores its zeros exactly.
      const float scale = amax > 0.0f ? amax / kE4m3Max : 1.0f;
      *scale_at(a.scale, b, h, block) = scale;
      for (std::int64_t i = 0; i < n; ++i) {
        std::uint8_t* out = dst + (t0 + i) * lo.token_stride;
        for (std::int64_t e = 0; e < d; ++e)
          out[e] = core::float_to_e4m3(rows[std::size_t(i * d + e)] / scale);
      }
    }
  });
}

void hadamard_transform(const HadamardArgs& a) {
  const Tensor& x = a.x;
  const std::int64_t seqlen = x.size(1), d = x.size(3);
  const auto lx = core::token_layout(x, false), lo = core::token_layout(a.out, false);
  per_batch_head(x, [&](std::int64_t b, std::int64_t h) {
    const tiled::HeadRows src = tiled::head_rows(x, lx, b, 0, h);
    const tiled::HeadRows dst = tiled::head_rows(a.out, lo, b, 0, h);
    std::vector<float> row(static_cast<std::size_t>(d));
    for (std::int64_t t = 0; t < seqlen; ++t) {
      tiled::load_row(src, t, d, row.data());  // the whole row before any of it is written
      hadamard_row(row.data(), d);
      tiled::store_row(dst, t, d, row.data(), 1.0f);
    }
  });
}

void dequantize_fp8(const Tensor& x, const Tensor& scale, std::int64_t block_size,
                    const Tensor& out) {
  const std::int64_t seqlen = x.size(1), d = x.size(3);
  const auto lx = core::token_layout(x, false), lo = core::token_layout(out, false);
  per_batch_head(x, [&](std::int64_t b, std::int64_t h) {
    const auto* src =
        static_cast<const std::uint8_t*>(x.data()) + b * lx.batch_stride + h * lx.head_stride;
    float* dst = out.data_as<float>() + b * lo.batch_stride + h * lo.head_stride;
    for (std::int64_t t = 0; t < seqlen; ++t) {
      const float s = *scale_at(scale, b, h, t / block_size);
      for (std::int64_t e = 0; e < d; ++e) {
        dst[t * lo.token_stride + e] = core::e4m3_to_float(src[t * lx.token_stride + e]) * s;
      }
    }
  });
}

}  // namespace flashkit::cpu
