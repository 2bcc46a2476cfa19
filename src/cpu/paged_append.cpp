// append_kv on the CPU: each new token's K and V rows go to their slot of their page; e4m3 pages
// store value / scale of the page and head, rounded to nearest even and saturated at +-448.
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/numeric.hpp"
#include "cpu/paged_backend.hpp"
#include "cpu/parallel.hpp"
#include "cpu/tiled_common.hpp"

namespace flashkit::cpu {

namespace {

// Writes token t of (sequence b, head h) of `src` to its cached row at position `pos`.
void write_row(const paged::PageRows& rows, const tiled::HeadRows& src, std::int64_t t,
               std::int64_t b, std::int64_t pos, std::int64_t h, std::int64_t dim,
               std::vector<float>& buffer) {
  const std::int64_t page = rows.page_of(b, pos);
  // The pages are the call's output: PageRows addresses them read-only for the attention paths.
  char* dst = const_cast<char*>(rows.row(page, pos, h));
  if (rows.dtype() != DType::e4m3) {  // same dtype as the new rows (validated): a plain copy
    const std::int64_t bytes = dim * std::int64_t(dtype_size(src.dtype));
    std::memcpy(dst, src.base + t * src.token_stride * std::int64_t(dtype_size(src.dtype)),
                std::size_t(bytes));
    return;
  }
  tiled::load_row(src, t, dim, buffer.data());
  const float scale = rows.scale(page, h);
  auto* out = reinterpret_cast<std::uint8_t*>(dst);
  for (std::int64_t e = 0; e < dim; ++e) {
    out[e] = core::float_to_e4m3(buffer[std::size_t(e)] / scale);
  }
}

}  // namespace

void append_kv(const AppendKVArgs& args, const core::AppendDims& d) {
  const paged::PageRows k_rows(args.kv.k_pages, args.kv.k_scale, args.kv.block_table);
  const paged::PageRows v_rows(args.kv.v_pages, args.kv.v_scale, args.kv.block_table);
  const auto lk = core::token_layout(args.k_new, false), lv = core::token_layout(args.v_new, false);
  const Tensor& start = args.start_pos;
  parallel_for(d.batch * d.heads_kv, [&](std::int64_t task) {
    const std::int64_t b = task / d.heads_kv, h = task % d.heads_kv;
    const std::int64_t pos0 = start.data_as<const std::int32_t>()[b * start.stride(0)];
    const tiled::HeadRows k_src = tiled::head_rows(args.k_new, lk, b, 0, h);
    const tiled::HeadRows v_src = tiled::head_rows(args.v_new, lv, b, 0, h);
    std::vector<float> buffer(std::size_t(d.head_dim));
    for (std::int64_t t = 0; t < d.new_tokens; ++t) {
      write_row(k_rows, k_src, t, b, pos0 + t, h, d.head_dim, buffer);
      write_row(v_rows, v_src, t, b, pos0 + t, h, d.head_dim_v, buffer);
    }
  });
}

}  // namespace flashkit::cpu
