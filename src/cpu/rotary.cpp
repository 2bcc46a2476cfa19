// apply_rotary on the CPU: one task per (sequence, head) walks the sequence's tokens; each row is
// converted to fp32 whole before it is written, so out may be x itself.
#include "cpu/rotary.hpp"

#include <cstdint>
#include <vector>

#include "core/checks.hpp"
#include "core/numeric.hpp"
#include "core/problem.hpp"
#include "cpu/parallel.hpp"
#include "cpu/tiled_common.hpp"

namespace flashkit::cpu {

namespace {

// Position of token i (of the sequence starting at packed row `start`) of sequence b.
std::int64_t position(const RotaryArgs& a, const core::RotaryDims& d, std::int64_t b,
                      std::int64_t start, std::int64_t i) {
  switch (d.positions) {
    case core::RotaryPositions::offsets:
      return core::host_i32(a.seqlen_offsets, b) + i;
    case core::RotaryPositions::ids: {
      const Tensor& ids = a.position_ids;
      const std::int64_t at =
          d.packed ? (start + i) * ids.stride(0) : b * ids.stride(0) + i * ids.stride(1);
      return ids.data_as<const std::int32_t>()[at];
    }
    default:
      return i;
  }
}

}  // namespace

void apply_rotary(const RotaryArgs& a, const core::RotaryDims& d) {
  const auto lx = core::token_layout(a.x, d.packed), lo = core::token_layout(a.out, d.packed);
  const std::int64_t half = d.rotary_dim / 2;
  parallel_for(d.batch * d.heads, [&](std::int64_t task) {
    const std::int64_t b = task / d.heads, h = task % d.heads;
    const std::int64_t start = d.packed ? core::host_i32(a.cu_seqlens, b) : 0;
    const std::int64_t len = d.packed ? core::host_i32(a.cu_seqlens, b + 1) - start : d.seqlen;
    const tiled::HeadRows src = tiled::head_rows(a.x, lx, b, start, h);
    const tiled::HeadRows dst = tiled::head_rows(a.out, lo, b, start, h);
    std::vector<float> row(static_cast<std::size_t>(d.head_dim));
    for (std::int64_t i = 0; i < len; ++i) {
      tiled::load_row(src, i, d.head_dim, row.data());
      const std::int64_t p = position(a, d, b, start, i);
      for (std::int64_t k = 0; k < half; ++k) {
        const auto c = float(core::load_as_double(a.cos.data(), a.cos.dtype(),
                                                  p * a.cos.stride(0) + k * a.cos.stride(1)));
        const auto s = float(core::load_as_double(a.sin.data(), a.sin.dtype(),
                                                  p * a.sin.stride(0) + k * a.sin.stride(1)));
        std::int64_t e1 = 0, e2 = 0;
        core::rotary_pair(k, half, a.interleaved, e1, e2);
        core::rotate_pair(row[std::size_t(e1)], row[std::size_t(e2)], c, s, a.conjugate,
                          row[std::size_t(e1)], row[std::size_t(e2)]);
      }
      tiled::store_row(dst, i, d.head_dim, row.data(), 1.0f);
    }
  });
}

}  // namespace flashkit::cpu
