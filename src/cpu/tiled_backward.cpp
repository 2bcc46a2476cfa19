// The CPU fast path of the backward: FlashAttention-2's algorithm in fp32, deterministic.
//
//   1. pack   (per query tile):  Q and dO as fp32 tiles, row-major and transposed, D = rowsum(dO
//                                * O) and lse in base 2, so the hot loop never converts them.
//   2. chunks (per sequence, KV head, chunk of KV tiles): for each KV tile, over every query tile
//      it meets,
//        S^T = K Q^T,  P^T = exp2(S^T - lse),  dP^T = V dO^T,  dS^T = P^T (dP^T - D) * scale
//        dV += P^T dO,  dK += dS^T Q   (owned by the chunk: written once at the end of the tile)
//        dQ_chunk += dS K              (a per-chunk partial: no two tasks write the same memory)
//   3. reduce (per query tile):  dQ = sum of the chunk partials in chunk order.
// The chunk boundaries depend only on the problem's shape and mask, never on the thread count
// or timing, and every sum runs in a fixed order, so results are bit-identical across runs.
#include <algorithm>
#include <cstdint>
#include <limits>
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
constexpr float kInf = std::numeric_limits<float>::infinity();

// Enough (sequence, KV head, chunk) tasks to keep a few cores busy when batch * heads_kv is
// small; more chunks cost one fp32 dQ partial each (8 chunks: 8x the size of dQ in fp32).
constexpr std::int64_t kTargetTasks = 8;
// Query rows per tile (all heads of a group): 64, 128 and 256 measured alike (within 4 %); 128
// keeps the packed query side and the dQ partials of one tile at 64 KiB each at d = 128.
constexpr std::int64_t kTileRows = 128;

// Float offsets of the parts of one packed query tile.
struct PackedLayout {
  std::int64_t q, qt, dout, doutt, delta, lse2, size;
};

PackedLayout packed_layout(const TileShape& sh) {
  PackedLayout p{};
  p.q = 0;                                 // [rows][d_pad]
  p.qt = p.q + sh.rows * sh.d_pad;         // [d][rows]
  p.dout = p.qt + sh.d * sh.rows;          // [rows][dv_pad]
  p.doutt = p.dout + sh.rows * sh.dv_pad;  // [dv][rows]
  p.delta = p.doutt + sh.dv * sh.rows;     // [rows]
  p.lse2 = p.delta + sh.rows;              // [rows]: lse * log2(e), +inf for empty rows
  p.size = p.lse2 + sh.rows;               // every part a multiple of kMicroCols: aligned rows
  return p;
}

// KV-tile boundaries of the chunks of each sequence (chunk c is tiles [bounds[c], bounds[c+1])).
struct ChunkPlan {
  std::vector<std::vector<std::int64_t>> bounds;
  std::int64_t max_chunks = 0;
};

struct BackwardCall {
  const BackwardArgs& args;
  const core::ProblemDims& dims;
  std::vector<core::SeqSpan> spans;
  core::TokenLayout lq, lk, lv, lo, ldo, ldq, ldk, ldv, ll;
  TileShape shape;
  tiled::ScoreRule rule;
  PackedLayout packed;
  tiled::TaskGrid tiles;  // (sequence, KV head, query tile)
  ChunkPlan plan;
  float* packed_tiles;  // tiles.size() * packed.size
  float* dq_partials;   // tiles.size() * plan.max_chunks * rows * d_pad

  float* packed_tile(std::int64_t b, std::int64_t hk, std::int64_t t) const {
    return packed_tiles + tiles.index(b, hk, t) * packed.size;
  }
  float* dq_partial(std::int64_t b, std::int64_t hk, std::int64_t t, std::int64_t chunk) const {
    const std::int64_t slot = tiles.index(b, hk, t) * plan.max_chunks + chunk;
    return dq_partials + slot * shape.rows * shape.d_pad;
  }
};

// Work of each KV tile of sequence b: one unit per query tile it meets plus one for packing K
// and V; chunks then get equal shares of it, so causal masks do not leave one chunk with most.
std::vector<std::int64_t> tile_work(const BackwardCall& c, std::int64_t b, std::int64_t kv_tiles,
                                    tiled::TileMask& mask) {
  const core::SeqSpan& span = c.spans[std::size_t(b)];
  std::vector<std::int64_t> work(std::size_t(kv_tiles), 1);
  for (std::int64_t t = 0; t < c.tiles.units(b); ++t) {
    const QueryTile tile = tiled::query_tile(span, b, 0, t, c.shape);
    tiled::build_tile_mask(mask, c.dims, c.args.mask.alibi_slopes, tile, c.shape);
    for (std::int64_t kb = 0; kb < kv_tiles; ++kb) {
      const std::int64_t j0 = kb * kKeyBlock, j1 = std::min(j0 + kKeyBlock, span.len_k);
      if (tiled::classify_block(c.dims.mask, mask, j0, j1) != BlockKind::skip) ++work[kb];
    }
  }
  return work;
}

// Boundaries of `chunks` consecutive ranges of tiles with about equal work: chunk k starts at
// the first tile whose preceding work reaches k / chunks of the total.
std::vector<std::int64_t> split_work(const std::vector<std::int64_t>& work, std::int64_t chunks) {
  const auto tiles = std::int64_t(work.size());
  std::int64_t total = 0;
  for (const std::int64_t w : work) total += w;
  std::vector<std::int64_t> bounds{0};
  std::int64_t done = work.empty() ? 0 : work[0];
  for (std::int64_t kb = 1; kb < tiles && std::int64_t(bounds.size()) < chunks; ++kb) {
    if (done * chunks >= total * std::int64_t(bounds.size())) bounds.push_back(kb);
    done += work[std::size_t(kb)];
  }
  while (std::int64_t(bounds.size()) < chunks) bounds.push_back(tiles);  // empty trailing chunks
  if (chunks > 0) bounds.push_back(tiles);
  return bounds;
}

ChunkPlan plan_chunks(const BackwardCall& c) {
  const std::int64_t per_sequence =
      std::max<std::int64_t>(1, tiled::ceil_div(kTargetTasks, c.dims.batch * c.dims.heads_kv));
  ChunkPlan plan;
  tiled::TileMask mask;
  for (std::int64_t b = 0; b < c.dims.batch; ++b) {
    const std::int64_t kv_tiles = tiled::ceil_div(c.spans[std::size_t(b)].len_k, kKeyBlock);
    const std::int64_t chunks = std::min(kv_tiles, per_sequence);
    plan.bounds.push_back(split_work(tile_work(c, b, kv_tiles, mask), chunks));
    plan.max_chunks = std::max(plan.max_chunks, chunks);
  }
  return plan;
}

// D = rowsum(dO * O) and lse2 = lse * log2(e) of a packed tile's rows (dO already packed).
void pack_row_stats(const BackwardCall& c, const QueryTile& tile, float* p) {
  const TileShape& sh = c.shape;
  float* delta = p + c.packed.delta;
  float* lse2 = p + c.packed.lse2;
  std::fill(delta, delta + sh.rows, 0.0f);
  std::fill(lse2, lse2 + sh.rows, kInf);  // padding rows: P = exp2(s - inf) = 0
  const float* lse = c.args.lse.data_as<const float>();
  float o[512];  // one row of O; head dims are at most 512 on the CPU (cpu_backend.cpp)
  for (std::int64_t g = 0; g < sh.group; ++g) {
    const std::int64_t h = tile.hk * sh.group + g;
    const tiled::HeadRows out = tiled::head_rows(c.args.out, c.lo, tile.b, tile.span.q_start, h);
    for (std::int64_t i = 0; i < tile.ntok; ++i) {
      const std::int64_t r = g * sh.tokens + i;
      tiled::load_row(out, tile.t0 + i, sh.dv, o);
      const float* dout = p + c.packed.dout + r * sh.dv_pad;
      float sum = 0.0f;
      for (std::int64_t e = 0; e < sh.dv; ++e) sum += dout[e] * o[e];
      delta[r] = sum;
      const float l = lse[core::element_offset(c.ll, tile.b, tile.span.q_start, tile.t0 + i, h)];
      // A row that saw no key (lse = -inf) must get P = 0, not exp2(s + inf).
      lse2[r] = l == -kInf ? kInf : l * float(core::kLog2e);
    }
  }
}

// Phase 1: converts one query tile's Q and dO, computes D and lse2, zeroes its dQ partials.
void pack_tile(const BackwardCall& c, const QueryTile& tile) {
  const TileShape& sh = c.shape;
  const PackedLayout& pl = c.packed;
  const std::int64_t t = tile.t0 / sh.tokens;
  float* p = c.packed_tile(tile.b, tile.hk, t);
  using tiled::Layout;
  tiled::load_query_tile(c.args.q, c.lq, tile, sh, sh.d, Layout::row_major, p + pl.q, sh.d_pad);
  tiled::load_query_tile(c.args.q, c.lq, tile, sh, sh.d, Layout::transposed, p + pl.qt, sh.rows);
  tiled::load_query_tile(c.args.dout, c.ldo, tile, sh, sh.dv, Layout::row_major, p + pl.dout,
                         sh.dv_pad);
  tiled::load_query_tile(c.args.dout, c.ldo, tile, sh, sh.dv, Layout::transposed, p + pl.doutt,
                         sh.rows);
  pack_row_stats(c, tile, p);
  float* partials = c.dq_partial(tile.b, tile.hk, t, 0);
  std::fill(partials, partials + c.plan.max_chunks * sh.rows * sh.d_pad, 0.0f);
}

// Per-thread buffers of phase 2.
struct ChunkScratch {
  Scratch k, v, dk, dv, s, dp, tanh;
  tiled::TileMask mask;
};

// P^T = exp2(S^T - lse2) over keys [0, nk); rows nk..nk_pad zeroed.
void probabilities(float* st, std::int64_t rows, std::int64_t nk, std::int64_t nk_pad,
                   const float* __restrict__ lse2) {
  for (std::int64_t j = 0; j < nk; ++j) {
    float* __restrict__ s = st + j * rows;
    for (std::int64_t i = 0; i < rows; ++i) s[i] = tiled::exp2_fast(s[i] - lse2[i]);
  }
  std::fill(st + nk * rows, st + nk_pad * rows, 0.0f);
}

// dS^T = P^T (dP^T - D) * scale, times softcap's derivative 1 - tanh^2 when on; in place over
// dP^T, rows nk..nk_pad zeroed.
void score_grads(float* dpt, const float* pt, const float* tanh, std::int64_t rows, std::int64_t nk,
                 std::int64_t nk_pad, const float* __restrict__ delta, float scale) {
  for (std::int64_t j = 0; j < nk; ++j) {
    float* __restrict__ ds = dpt + j * rows;
    const float* __restrict__ p = pt + j * rows;
    if (tanh) {
      const float* __restrict__ t = tanh + j * rows;
      for (std::int64_t i = 0; i < rows; ++i) {
        ds[i] = p[i] * (ds[i] - delta[i]) * scale * (1.0f - t[i] * t[i]);
      }
    } else {
      for (std::int64_t i = 0; i < rows; ++i) ds[i] = p[i] * (ds[i] - delta[i]) * scale;
    }
  }
  std::fill(dpt + nk * rows, dpt + nk_pad * rows, 0.0f);
}

// The packed K and V tiles and the dK / dV accumulators of one KV tile.
struct KvTile {
  std::int64_t j0, nk, nk_pad;
  const float *k, *v;
  float *dk, *dv;
};

// One (KV tile, query tile) pair: everything of phase 2's loop body.
void pair_step(const BackwardCall& c, const KvTile& kv, const float* packed, BlockKind kind,
               float* dq_partial, ChunkScratch& ws) {
  const TileShape& sh = c.shape;
  const PackedLayout& pl = c.packed;
  const std::int64_t rows = sh.rows, nk_pad = kv.nk_pad;
  float* s = ws.s.floats(std::size_t(kKeyBlock * rows));
  float* dp = ws.dp.floats(std::size_t(kKeyBlock * rows));
  float* tanh = c.rule.cap_log2 > 0 ? ws.tanh.floats(std::size_t(kKeyBlock * rows)) : nullptr;
  using tiled::gemm_tile;
  gemm_tile<false>(nk_pad, rows, sh.d, {kv.k, sh.d_pad, 1}, {packed + pl.qt, rows}, {s, rows});
  tiled::score_tile(s, rows, kv.nk, kv.j0, c.rule, ws.mask, kind, tanh);
  probabilities(s, rows, kv.nk, nk_pad, packed + pl.lse2);
  gemm_tile<false>(nk_pad, rows, sh.dv, {kv.v, sh.dv_pad, 1}, {packed + pl.doutt, rows},
                   {dp, rows});
  score_grads(dp, s, tanh, rows, kv.nk, nk_pad, packed + pl.delta, c.dims.scale);
  gemm_tile<true>(nk_pad, sh.dv_pad, rows, {s, rows, 1}, {packed + pl.dout, sh.dv_pad},
                  {kv.dv, sh.dv_pad});
  gemm_tile<true>(nk_pad, sh.d_pad, rows, {dp, rows, 1}, {packed + pl.q, sh.d_pad},
                  {kv.dk, sh.d_pad});
  gemm_tile<true>(rows, sh.d_pad, nk_pad, {dp, 1, rows}, {kv.k, sh.d_pad}, {dq_partial, sh.d_pad});
}

// Phase 2: one chunk of KV tiles of one (sequence, KV head).
void run_chunk(const BackwardCall& c, const tiled::TaskGrid::Task& task, ChunkScratch& ws) {
  const TileShape& sh = c.shape;
  const core::SeqSpan& span = c.spans[std::size_t(task.b)];
  const auto& bounds = c.plan.bounds[std::size_t(task.b)];
  const auto head = [&](const Tensor& t, const core::TokenLayout& lay) {
    return tiled::head_rows(t, lay, task.b, span.k_start, task.hk);
  };
  const tiled::HeadRows k_rows = head(c.args.k, c.lk), v_rows = head(c.args.v, c.lv);
  const tiled::HeadRows dk_rows = head(c.args.dk, c.ldk), dv_rows = head(c.args.dv, c.ldv);
  float* k = ws.k.floats(std::size_t(kKeyBlock * sh.d_pad));
  float* v = ws.v.floats(std::size_t(kKeyBlock * sh.dv_pad));
  float* dk = ws.dk.floats(std::size_t(kKeyBlock * sh.d_pad));
  float* dv = ws.dv.floats(std::size_t(kKeyBlock * sh.dv_pad));
  for (std::int64_t kb = bounds[std::size_t(task.unit)]; kb < bounds[std::size_t(task.unit + 1)];
       ++kb) {
    const std::int64_t j0 = kb * kKeyBlock, nk = std::min(kKeyBlock, span.len_k - j0);
    const KvTile kv{j0, nk, tiled::round_up(nk, tiled::kMicroRows), k, v, dk, dv};
    tiled::load_rows(k_rows, j0, nk, sh.d, kv.nk_pad, k, sh.d_pad);
    tiled::load_rows(v_rows, j0, nk, sh.dv, kv.nk_pad, v, sh.dv_pad);
    std::fill(dk, dk + kv.nk_pad * sh.d_pad, 0.0f);
    std::fill(dv, dv + kv.nk_pad * sh.dv_pad, 0.0f);
    for (std::int64_t t = 0; t < c.tiles.units(task.b); ++t) {
      const QueryTile tile = tiled::query_tile(span, task.b, task.hk, t, sh);
      tiled::build_tile_mask(ws.mask, c.dims, c.args.mask.alibi_slopes, tile, sh);
      const BlockKind kind = tiled::classify_block(c.dims.mask, ws.mask, j0, j0 + nk);
      if (kind == BlockKind::skip) continue;
      pair_step(c, kv, c.packed_tile(task.b, task.hk, t), kind,
                c.dq_partial(task.b, task.hk, t, task.unit), ws);
    }
    for (std::int64_t j = 0; j < nk; ++j) {
      tiled::store_row(dk_rows, j0 + j, sh.d, dk + j * sh.d_pad, 1.0f);
      tiled::store_row(dv_rows, j0 + j, sh.dv, dv + j * sh.dv_pad, 1.0f);
    }
  }
}

// Phase 3: dQ of one query tile, the chunk partials summed in chunk order.
void reduce_dq(const BackwardCall& c, const QueryTile& tile) {
  const TileShape& sh = c.shape;
  const std::int64_t t = tile.t0 / sh.tokens;
  const auto chunks = std::int64_t(c.plan.bounds[std::size_t(tile.b)].size()) - 1;
  float row[512];  // head dims are at most 512 on the CPU (cpu_backend.cpp)
  for (std::int64_t g = 0; g < sh.group; ++g) {
    const std::int64_t h = tile.hk * sh.group + g;
    const tiled::HeadRows dq = tiled::head_rows(c.args.dq, c.ldq, tile.b, tile.span.q_start, h);
    for (std::int64_t i = 0; i < tile.ntok; ++i) {
      const std::int64_t r = g * sh.tokens + i;
      std::fill(row, row + sh.d, 0.0f);
      for (std::int64_t chunk = 0; chunk < chunks; ++chunk) {
        const float* __restrict__ part = c.dq_partial(tile.b, tile.hk, t, chunk) + r * sh.d_pad;
        for (std::int64_t e = 0; e < sh.d; ++e) row[e] += part[e];
      }
      tiled::store_row(dq, tile.t0 + i, sh.d, row, 1.0f);
    }
  }
}

// Runs body(tile) for every query tile of the call, in parallel.
template <typename Body>
void for_each_query_tile(const BackwardCall& c, const Body& body) {
  parallel_for(c.tiles.size(), [&](std::int64_t index) {
    const auto task = c.tiles.at(index);
    body(tiled::query_tile(c.spans[std::size_t(task.b)], task.b, task.hk, task.unit, c.shape));
  });
}

}  // namespace

void tiled_backward(const BackwardArgs& args, const core::ProblemDims& dims) {
  const bool varlen = dims.varlen;
  const auto layout = [&](const Tensor& t) { return core::token_layout(t, varlen); };
  const TileShape shape = tiled::tile_shape(dims, kTileRows);
  auto spans = sequence_spans(args, dims);
  tiled::TaskGrid tiles(dims.heads_kv, tiled::query_tiles_per_sequence(spans, shape));
  BackwardCall c{args,
                 dims,
                 std::move(spans),
                 layout(args.q),
                 layout(args.k),
                 layout(args.v),
                 layout(args.out),
                 layout(args.dout),
                 layout(args.dq),
                 layout(args.dk),
                 layout(args.dv),
                 core::lse_layout(args.lse, varlen),
                 shape,
                 tiled::score_rule(dims, args.mask.alibi_slopes.defined()),
                 packed_layout(shape),
                 std::move(tiles),
                 {},
                 nullptr,
                 nullptr};
  c.plan = plan_chunks(c);
  // O(tokens) scratch: the packed query side (about 2x q and dout in fp32) and the dQ partials.
  Scratch packed, partials;
  c.packed_tiles = packed.floats(std::size_t(c.tiles.size() * c.packed.size));
  c.dq_partials =
      partials.floats(std::size_t(c.tiles.size() * c.plan.max_chunks * shape.rows * shape.d_pad));

  for_each_query_tile(c, [&](const QueryTile& tile) { pack_tile(c, tile); });
  std::vector<std::int64_t> chunks_per_sequence;
  for (const auto& bounds : c.plan.bounds) {
    chunks_per_sequence.push_back(std::int64_t(bounds.size()) - 1);
  }
  const tiled::TaskGrid chunks(dims.heads_kv, chunks_per_sequence);
  parallel_for(chunks.size(), [&](std::int64_t index) {
    thread_local ChunkScratch scratch;
    run_chunk(c, chunks.at(index), scratch);
  });
  for_each_query_tile(c, [&](const QueryTile& tile) { reduce_dq(c, tile); });
}

}  // namespace flashkit::cpu
