// The CPU fast path of the forward: FlashAttention-2 loop order in fp32. One task is one query
// tile (all query heads of one KV head, `TileShape::tokens` tokens); it keeps O in a local fp32
// tile and walks the KV tiles once, skipping the ones the mask hides entirely:
//   S^T = K Q^T        (micro-kernel, keys as rows, queries along the vector lanes)
//   scores             (scale, softcap, ALiBi in base 2; the mask only on blocks it cuts)
//   P^T = exp2(S^T - m), m and l updated per query (core::SoftmaxState), O *= alpha
//   O  += P V          (micro-kernel)
// and divides by l once at the end. See docs/kernels/cpu_tiled.md for the measurements.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "core/softmax_state.hpp"
#include "cpu/cpu_backend.hpp"
#include "cpu/parallel.hpp"
#include "cpu/tiled_common.hpp"
#include "cpu/tiled_gemm.hpp"
#include "cpu/tiled_math.hpp"

namespace flashkit::cpu {

namespace {

using tiled::BlockKind;
using tiled::kKeyBlock;
using tiled::QueryTile;
using tiled::Scratch;
using tiled::TileShape;
using State = core::SoftmaxState<float>;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Everything a task reads, derived once per call.
struct ForwardCall {
  const AttentionArgs& args;
  const core::ProblemDims& dims;
  std::vector<core::SeqSpan> spans;
  core::TokenLayout lq, lk, lv, lo, ll;
  TileShape shape;
  tiled::ScoreRule rule;
};

// Per-thread buffers, reused across tasks and calls (they only grow).
struct ForwardScratch {
  Scratch qt, k, v, s, tanh, o, stats;
  tiled::TileMask mask;
  std::vector<State> state;
};

// Per-query vectors of one online-softmax step, carved from one scratch block.
struct StepVectors {
  float *block_max, *alpha, *m_safe, *sum;
};

// One online-softmax step over a transposed score tile: P^T overwrites S^T (rows nk..nk_pad are
// zeroed for the P V product), state absorbs the block, and alpha[i] is the factor O's row i
// must be rescaled by. Everything is element-wise across queries, so the loops vectorise.
void softmax_step(float* st, std::int64_t rows, std::int64_t nk, std::int64_t nk_pad, State* state,
                  const StepVectors& v) {
  std::fill(v.block_max, v.block_max + rows, kNegInf);
  for (std::int64_t j = 0; j < nk; ++j) {
    const float* __restrict__ s = st + j * rows;
    float* __restrict__ mx = v.block_max;
    for (std::int64_t i = 0; i < rows; ++i) mx[i] = s[i] > mx[i] ? s[i] : mx[i];
  }
  for (std::int64_t i = 0; i < rows; ++i) {
    v.alpha[i] = state[i].absorb_max(v.block_max[i]);
    // A query that has seen no key keeps m = -inf; exp2(-inf - 0) = 0 keeps its P at 0.
    v.m_safe[i] = state[i].m == kNegInf ? 0.0f : state[i].m;
    v.sum[i] = 0.0f;
  }
  for (std::int64_t j = 0; j < nk; ++j) {
    float* __restrict__ s = st + j * rows;
    const float* __restrict__ m = v.m_safe;
    float* __restrict__ sum = v.sum;
    for (std::int64_t i = 0; i < rows; ++i) {
      const float p = tiled::exp2_fast(s[i] - m[i]);
      s[i] = p;
      sum[i] += p;
    }
  }
  std::fill(st + nk * rows, st + nk_pad * rows, 0.0f);
  for (std::int64_t i = 0; i < rows; ++i) state[i].l = state[i].l * v.alpha[i] + v.sum[i];
}

void rescale_rows(float* o, std::int64_t rows, std::int64_t ld, const float* alpha) {
  for (std::int64_t i = 0; i < rows; ++i) {
    if (alpha[i] == 1.0f) continue;  // the max did not move: the common case after a few tiles
    float* __restrict__ row = o + i * ld;
    const float a = alpha[i];
    for (std::int64_t e = 0; e < ld; ++e) row[e] *= a;
  }
}

// O = O / l (0 for a query that saw no key) in out's dtype, and lse (natural log) if asked.
void write_tile(const ForwardCall& c, const QueryTile& tile, const float* o, const State* state) {
  const TileShape& sh = c.shape;
  const bool want_lse = c.args.lse.defined();
  float* lse = want_lse ? c.args.lse.data_as<float>() : nullptr;
  for (std::int64_t g = 0; g < sh.group; ++g) {
    const std::int64_t h = tile.hk * sh.group + g;
    const tiled::HeadRows out = tiled::head_rows(c.args.out, c.lo, tile.b, tile.span.q_start, h);
    for (std::int64_t i = 0; i < tile.ntok; ++i) {
      const std::int64_t r = g * sh.tokens + i;
      const State& st = state[r];
      const float inv_l = st.l > 0.0f ? 1.0f / st.l : 0.0f;
      tiled::store_row(out, tile.t0 + i, sh.dv, o + r * sh.dv_pad, inv_l);
      if (want_lse) {
        lse[core::element_offset(c.ll, tile.b, tile.span.q_start, tile.t0 + i, h)] = st.lse();
      }
    }
  }
}

// Query rows per tile (all heads of a group). Each tile packs every K/V tile it meets, so more
// rows amortise that copy: 256 rows ran 7 % faster than 128 and 128 6 % faster than 64 (see
// docs/kernels/cpu_tiled.md). But every thread needs a few tiles, so halve while there are
// fewer than 4 per thread. Outputs do not depend on the choice: a row's arithmetic is the same
// in any tile.
TileShape forward_shape(const core::ProblemDims& dims, const std::vector<core::SeqSpan>& spans) {
  constexpr std::int64_t kMaxRows = 256, kMinRows = 32, kTilesPerThread = 4;
  for (std::int64_t rows = kMaxRows;; rows /= 2) {
    const TileShape shape = tiled::tile_shape(dims, rows);
    std::int64_t tiles = 0;
    for (const std::int64_t t : tiled::query_tiles_per_sequence(spans, shape)) tiles += t;
    if (rows <= kMinRows || tiles * dims.heads_kv >= kTilesPerThread * num_threads()) return shape;
  }
}

// The buffers of one query tile, carved from the thread's scratch.
struct TileBuffers {
  float *qt, *o, *k, *v, *s, *tanh;
  StepVectors step;
};

TileBuffers tile_buffers(const ForwardCall& c, ForwardScratch& ws) {
  const TileShape& sh = c.shape;
  const std::int64_t rows = sh.rows;
  TileBuffers t{};
  t.qt = ws.qt.floats(std::size_t(sh.d * rows));
  t.o = ws.o.floats(std::size_t(rows * sh.dv_pad));
  t.k = ws.k.floats(std::size_t(kKeyBlock * sh.d));
  t.v = ws.v.floats(std::size_t(kKeyBlock * sh.dv_pad));
  t.s = ws.s.floats(std::size_t(kKeyBlock * rows));
  t.tanh = c.rule.cap_log2 > 0 ? ws.tanh.floats(std::size_t(kKeyBlock * rows)) : nullptr;
  float* stats = ws.stats.floats(std::size_t(4 * rows));
  t.step = {stats, stats + rows, stats + 2 * rows, stats + 3 * rows};
  return t;
}

// K and V of the tile's sequence and KV head.
struct KvSource {
  tiled::HeadRows k, v;
};

// Folds keys [j0, j1) into the tile's O, m and l: pack K and V to fp32, S^T = K Q^T, scores,
// the online-softmax step, O = alpha O + P V.
void absorb_kv_tile(const ForwardCall& c, const KvSource& kv, std::int64_t j0, std::int64_t j1,
                    BlockKind kind, const TileBuffers& t, ForwardScratch& ws) {
  const TileShape& sh = c.shape;
  const std::int64_t rows = sh.rows;
  const std::int64_t nk = j1 - j0, nk_pad = tiled::round_up(nk, tiled::kMicroRows);
  tiled::load_rows(kv.k, j0, nk, sh.d, nk_pad, t.k, sh.d);
  tiled::load_rows(kv.v, j0, nk, sh.dv, nk_pad, t.v, sh.dv_pad);
  tiled::gemm_tile<false>(nk_pad, rows, sh.d, {t.k, sh.d, 1}, {t.qt, rows}, {t.s, rows});
  tiled::score_tile(t.s, rows, nk, j0, c.rule, ws.mask, kind, t.tanh);
  softmax_step(t.s, rows, nk, nk_pad, ws.state.data(), t.step);
  rescale_rows(t.o, rows, sh.dv_pad, t.step.alpha);
  tiled::gemm_tile<true>(rows, sh.dv_pad, nk_pad, {t.s, 1, rows}, {t.v, sh.dv_pad},
                         {t.o, sh.dv_pad});
}

void run_tile(const ForwardCall& c, const QueryTile& tile, ForwardScratch& ws) {
  const TileShape& sh = c.shape;
  const TileBuffers t = tile_buffers(c, ws);
  tiled::load_query_tile(c.args.q, c.lq, tile, sh, sh.d, tiled::Layout::transposed, t.qt, sh.rows);
  std::fill(t.o, t.o + sh.rows * sh.dv_pad, 0.0f);
  ws.state.assign(std::size_t(sh.rows), State{});
  tiled::build_tile_mask(ws.mask, c.dims, c.args.mask.alibi_slopes, tile, sh);
  const KvSource kv{tiled::head_rows(c.args.k, c.lk, tile.b, tile.span.k_start, tile.hk),
                    tiled::head_rows(c.args.v, c.lv, tile.b, tile.span.k_start, tile.hk)};
  for (std::int64_t j0 = 0; j0 < tile.span.len_k; j0 += kKeyBlock) {
    const std::int64_t j1 = std::min(j0 + kKeyBlock, tile.span.len_k);
    const BlockKind kind = tiled::classify_block(c.dims.mask, ws.mask, j0, j1);
    if (kind != BlockKind::skip) absorb_kv_tile(c, kv, j0, j1, kind, t, ws);
  }
  write_tile(c, tile, t.o, ws.state.data());
}

}  // namespace

void tiled_forward(const AttentionArgs& args, const core::ProblemDims& dims) {
  const bool varlen = dims.varlen;
  auto spans = sequence_spans(args, dims);
  const TileShape shape = forward_shape(dims, spans);
  ForwardCall c{args,
                dims,
                std::move(spans),
                core::token_layout(args.q, varlen),
                core::token_layout(args.k, varlen),
                core::token_layout(args.v, varlen),
                core::token_layout(args.out, varlen),
                args.lse.defined() ? core::lse_layout(args.lse, varlen) : core::TokenLayout{},
                shape,
                tiled::score_rule(dims, args.mask.alibi_slopes.defined())};
  const tiled::TaskGrid grid(dims.heads_kv, tiled::query_tiles_per_sequence(c.spans, c.shape));
  parallel_for(grid.size(), [&](std::int64_t index) {
    thread_local ForwardScratch scratch;
    const auto task = grid.at(index);
    // Last tiles first: under a causal mask they see the most keys, and the pool hands out
    // indices in order, so the long tasks start early and the short ones fill the tail.
    const std::int64_t tile_index = grid.units(task.b) - 1 - task.unit;
    const auto& span = c.spans[std::size_t(task.b)];
    run_tile(c, tiled::query_tile(span, task.b, task.hk, tile_index, c.shape), scratch);
  });
}

}  // namespace flashkit::cpu
