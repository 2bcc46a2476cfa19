// The fast path's task: online softmax in fp32 over blocks of cached keys gathered through the
// block table. Each K/V block is loaded (and dequantised) once and used by every query row of
// the task, i.e. by all query heads of the GQA group and all q_len queries: decode reads the
// cache once per KV head instead of once per query head.
//
// Loops are written for the vectoriser: each score is a dot product over the head dim in 16
// lanes (paged_math.hpp; K rows are converted to fp32 as they are, no transposition), and the
// output accumulates along the head dim in registers across a block (o[e] += p[j] * v[j][e]).
#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/mask_rules.hpp"
#include "core/numeric.hpp"
#include "core/softmax_state.hpp"
#include "cpu/paged_backend.hpp"
#include "cpu/paged_math.hpp"
#include "cpu/tiled_common.hpp"
#include "cpu/tiled_math.hpp"

namespace flashkit::cpu::paged {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Keys per block: 64 keys' K and V rows at d = 128 are 64 KiB of fp32, within L2 with room for
// the group's rows; the softmax rescales once per block.
constexpr std::int64_t kKeyBlock = 64;

// `dim` elements of one cached row as fp32, times the page's scale for e4m3.
void load_page_row(const PageRows& rows, std::int64_t page, std::int64_t t, std::int64_t h,
                   std::int64_t dim, float* __restrict__ dst) {
  const char* src = rows.row(page, t, h);
  switch (rows.dtype()) {
    case DType::e4m3: {
      const auto* x = reinterpret_cast<const std::uint8_t*>(src);
      const float scale = rows.scale(page, h);
      for (std::int64_t e = 0; e < dim; ++e) dst[e] = e4m3_bits_to_float(x[e]) * scale;
      return;
    }
    case DType::f32: {
      const auto* x = reinterpret_cast<const float*>(src);
      for (std::int64_t e = 0; e < dim; ++e) dst[e] = x[e];
      return;
    }
    case DType::f16: {
      const auto* x = reinterpret_cast<const std::uint16_t*>(src);
      for (std::int64_t e = 0; e < dim; ++e) dst[e] = tiled::f16_bits_to_float(x[e]);
      return;
    }
    case DType::bf16: {
      const auto* x = reinterpret_cast<const std::uint16_t*>(src);
      for (std::int64_t e = 0; e < dim; ++e) dst[e] = tiled::bf16_bits_to_float(x[e]);
      return;
    }
    default:
      return;  // validation admits no other page dtype
  }
}

// Keys ahead of the one being converted whose K and V rows are prefetched: rows of one head are
// strided by the other heads and pages are scattered, which the hardware prefetcher does not
// follow, so without this every row waits on DRAM on its own (measured 2x slower for e4m3).
constexpr std::int64_t kPrefetchKeys = 16;

void prefetch_row(const char* row, std::int64_t bytes) {
  constexpr std::int64_t kLine = 64;
  for (std::int64_t off = 0; off < bytes; off += kLine) __builtin_prefetch(row + off);
}

// Per-row constants of a task: its causal diagonal, key band and ALiBi slope (base 2).
struct RowMask {
  std::int64_t diag, lo, hi;
  float slope2;
};

// The score transform of one row of a block, in place: raw dot products (already times
// dot_scale) -> base-2 scores, -inf where the mask hides the key. Returns the block's max.
float transform_row(float* __restrict__ s, std::int64_t nk, std::int64_t j0, const RowMask& row,
                    float cap_log2, std::int64_t prefix_len) {
  if (cap_log2 > 0.0f) {
    for (std::int64_t j = 0; j < nk; ++j) s[j] = cap_log2 * tiled::tanh_fast(s[j]);
  }
  if (row.slope2 != 0.0f) {
    for (std::int64_t j = 0; j < nk; ++j) {
      const std::int64_t dist = row.diag >= j0 + j ? row.diag - j0 - j : j0 + j - row.diag;
      s[j] -= row.slope2 * float(dist);
    }
  }
  float m = kNegInf;
  for (std::int64_t j = 0; j < nk; ++j) {
    const std::int64_t key = j0 + j;
    const bool visible = key < prefix_len || (key >= row.lo && key <= row.hi);
    s[j] = visible ? s[j] : kNegInf;
    m = std::max(m, s[j]);
  }
  return m;
}

}  // namespace

void attend_keys(const PagedAttentionArgs& args, const core::PagedDims& d, const SeqQueries& seq,
                 std::int64_t b, std::int64_t hk, std::int64_t k0, std::int64_t k1, float* o,
                 float* lse) {
  const std::int64_t group = d.group(), nq = seq.len_q, rows = group * nq;
  const std::int64_t dk = d.head_dim, dv = d.head_dim_v;
  // Rows of q, K, V and the accumulators zero-padded to whole 16-lane vectors.
  const std::int64_t dk_pad = tiled::round_up(dk, kLanes), dv_pad = tiled::round_up(dv, kLanes);
  const core::MaskRule& rule = d.mask;
  // Base-2 scores as in tiled::score_rule: softcap folds 1/softcap into the dot's scale.
  const bool capped = rule.softcap > 0.0f;
  const float dot_scale = float(capped ? d.scale / rule.softcap : d.scale * core::kLog2e);
  const float cap_log2 = capped ? float(rule.softcap * core::kLog2e) : 0.0f;

  // The group's queries, pre-scaled, and each row's mask; the task's keys are the union of the
  // rows' bands (and the prefix) within [k0, k1), so a sliding window reads only its pages.
  std::vector<float> q(std::size_t(rows * dk_pad), 0.0f);
  std::vector<RowMask> mask(static_cast<std::size_t>(rows));
  const auto lq = core::token_layout(args.q, d.varlen_q);
  const std::int64_t shift = seq.len_k - nq;
  std::int64_t first = k1, last = k0 - 1;
  for (std::int64_t g = 0; g < group; ++g) {
    const std::int64_t h = hk * group + g;
    const tiled::HeadRows q_rows = tiled::head_rows(args.q, lq, b, seq.q_start, h);
    const float slope2 = float(tiled::alibi_slope(args.mask.alibi_slopes, b, h) * core::kLog2e);
    for (std::int64_t i = 0; i < nq; ++i) {
      const std::int64_t r = g * nq + i;
      float* qr = q.data() + r * dk_pad;
      tiled::load_row(q_rows, i, dk, qr);
      for (std::int64_t e = 0; e < dk; ++e) qr[e] *= dot_scale;
      const core::KeyBand band = core::key_band(rule, i + shift, seq.len_k);
      mask[std::size_t(r)] = {i + shift, band.lo, band.hi, slope2};
      first = std::min(first, band.lo);
      last = std::max(last, band.hi);
    }
  }
  if (rule.prefix_len > 0) {
    first = 0;
    last = std::max(last, rule.prefix_len - 1);
  }
  const std::int64_t begin = std::max(k0, first), end = std::min(k1, last + 1);

  const PageRows k_rows(args.kv.k_pages, args.kv.k_scale, args.kv.block_table);
  const PageRows v_rows(args.kv.v_pages, args.kv.v_scale, args.kv.block_table);
  std::vector<core::SoftmaxState<float>> state(static_cast<std::size_t>(rows));
  std::vector<float> acc(std::size_t(rows * dv_pad), 0.0f);
  std::vector<float> kb(std::size_t(kKeyBlock * dk_pad), 0.0f);
  std::vector<float> vb(std::size_t(kKeyBlock * dv_pad), 0.0f);
  std::vector<float> s(std::size_t{kKeyBlock});
  const std::int64_t k_bytes = dk * std::int64_t(dtype_size(k_rows.dtype()));
  const std::int64_t v_bytes = dv * std::int64_t(dtype_size(v_rows.dtype()));
  for (std::int64_t j0 = begin; j0 < end; j0 += kKeyBlock) {
    const std::int64_t nk = std::min(kKeyBlock, end - j0);
    for (std::int64_t j = 0; j < nk; ++j) {
      const std::int64_t ahead = j0 + j + kPrefetchKeys;
      if (ahead < end) {
        const std::int64_t ahead_page = k_rows.page_of(b, ahead);
        prefetch_row(k_rows.row(ahead_page, ahead, hk), k_bytes);
        prefetch_row(v_rows.row(ahead_page, ahead, hk), v_bytes);
      }
      const std::int64_t page = k_rows.page_of(b, j0 + j);
      load_page_row(k_rows, page, j0 + j, hk, dk, kb.data() + j * dk_pad);
      load_page_row(v_rows, page, j0 + j, hk, dv, vb.data() + j * dv_pad);
    }
    for (std::int64_t r = 0; r < rows; ++r) {
      float* __restrict__ sr = s.data();
      const float* qr = q.data() + r * dk_pad;
      dot_rows(qr, kb.data(), nk, dk_pad, sr);
      const float block_max =
          transform_row(sr, nk, j0, mask[std::size_t(r)], cap_log2, rule.prefix_len);
      if (block_max == kNegInf) continue;  // the row sees none of these keys
      core::SoftmaxState<float>& st = state[std::size_t(r)];
      const float alpha = st.absorb_max(block_max);
      float sum = 0.0f;
      for (std::int64_t j = 0; j < nk; ++j) {
        sr[j] = tiled::exp2_fast(sr[j] - st.m);
        sum += sr[j];
      }
      st.l = st.l * alpha + sum;
      float* __restrict__ ar = acc.data() + r * dv_pad;
      for (std::int64_t e = 0; e < dv_pad; ++e) ar[e] *= alpha;
      accumulate_rows(sr, vb.data(), nk, dv_pad, ar);
    }
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    const core::SoftmaxState<float>& st = state[std::size_t(r)];
    const float inv = st.l > 0.0f ? 1.0f / st.l : 0.0f;
    for (std::int64_t e = 0; e < dv; ++e) o[r * dv + e] = acc[std::size_t(r * dv_pad + e)] * inv;
    lse[r] = st.lse();
  }
}

}  // namespace flashkit::cpu::paged
