// What the tiled forward and backward share: the tile geometry, packing of strided f32/f16/bf16
// rows into fp32 tiles, the per-tile mask data, block classification (skip / full / cut) and the
// score transform (scale, softcap, ALiBi, mask) on a transposed score tile.
//
// Score tiles are stored transposed, S^T[key][query]: queries run along the vector lanes, so the
// softmax's per-query max and sum are element-wise operations over key rows and never need a
// horizontal reduction, and only the query tile (loaded once per task) has to be transposed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/mask_rules.hpp"
#include "core/problem.hpp"
#include "flashkit/tensor.hpp"

namespace flashkit::cpu::tiled {

// Keys per KV tile: a 128 x 128 fp32 K or V tile is 64 KiB, so K, V and the score tile of one
// task sit in L2 (2 MiB per core here) while one 32-key strip of each stays in L1.
constexpr std::int64_t kKeyBlock = 128;

inline std::int64_t round_up(std::int64_t x, std::int64_t m) {
  return (x + m - 1) / m * m;
}
inline std::int64_t ceil_div(std::int64_t x, std::int64_t m) {
  return (x + m - 1) / m;
}

// Geometry of the tiles of one call. A query tile holds `tokens` consecutive query tokens of
// every query head of one KV head (GQA: the K/V tile is packed once for the whole group); its
// row r is head (hk * group + r / tokens), token (t0 + r % tokens). Rows past group * tokens
// pad the count to a multiple of the micro-kernel's kMicroCols columns (tiled_gemm.hpp).
struct TileShape {
  std::int64_t group, tokens, rows;
  std::int64_t d, dv, d_pad, dv_pad;  // head dims and their kMicroCols multiples
};
// About target_rows rows per tile (fewer when the queries are shorter: no tile of 256 rows for
// a 1-token decode step).
TileShape tile_shape(const core::ProblemDims& dims, std::int64_t target_rows);

// One query tile of one sequence.
struct QueryTile {
  std::int64_t b, hk, t0, ntok;  // tokens [t0, t0 + ntok) of sequence b, KV head hk
  core::SeqSpan span;
};

// Enumerates (sequence, KV head, unit) where each sequence has its own number of units (query
// tiles or KV chunks); the flat index is also the storage index of per-unit data.
class TaskGrid {
 public:
  TaskGrid(std::int64_t heads_kv, std::vector<std::int64_t> units_per_sequence);
  struct Task {
    std::int64_t b, hk, unit;
  };
  std::int64_t size() const { return offsets_.back(); }
  Task at(std::int64_t index) const;
  std::int64_t index(std::int64_t b, std::int64_t hk, std::int64_t unit) const;
  std::int64_t units(std::int64_t b) const { return units_[std::size_t(b)]; }

 private:
  std::int64_t heads_kv_;
  std::vector<std::int64_t> units_, offsets_;
};

// Query tiles per sequence, for a TaskGrid.
std::vector<std::int64_t> query_tiles_per_sequence(const std::vector<core::SeqSpan>& spans,
                                                   const TileShape& shape);
QueryTile query_tile(const core::SeqSpan& span, std::int64_t b, std::int64_t hk,
                     std::int64_t tile_index, const TileShape& shape);

// Grows-only float scratch, 64-byte aligned so that rows of a multiple of 16 floats start on a
// cache line (an AVX-512 load that straddles two lines costs two).
class Scratch {
 public:
  float* floats(std::size_t n);

 private:
  struct Free {
    void operator()(float* p) const;
  };
  std::unique_ptr<float[], Free> data_;
  std::size_t size_ = 0;
};

// One (sequence, head) of a [.., tokens, heads, dim] tensor: token t's row starts at
// base + t * token_stride elements and is contiguous.
struct HeadRows {
  char* base;
  DType dtype;
  std::int64_t token_stride;
};
HeadRows head_rows(const Tensor& t, const core::TokenLayout& lay, std::int64_t b,
                   std::int64_t start, std::int64_t h);

// Converts `dim` elements of token t to fp32.
void load_row(const HeadRows& src, std::int64_t t, std::int64_t dim, float* dst);
// Writes src * mul, rounded to the tensor's dtype, to token t.
void store_row(const HeadRows& dst, std::int64_t t, std::int64_t dim, const float* src, float mul);

// Tokens [t0, t0 + n) into dst[i * ld + e]; columns dim..ld and rows n..rows zeroed.
void load_rows(const HeadRows& src, std::int64_t t0, std::int64_t n, std::int64_t dim,
               std::int64_t rows, float* dst, std::int64_t ld);

// The query-tile rows of one token tensor of the query side (q, dout, out), for every head of
// the group: row-major dst[r * ld + e] or transposed dst[e * shape.rows + r]. Padding is zeroed.
enum class Layout : std::uint8_t { row_major, transposed };
void load_query_tile(const Tensor& t, const core::TokenLayout& lay, const QueryTile& tile,
                     const TileShape& shape, std::int64_t dim, Layout layout, float* dst,
                     std::int64_t ld);

// ALiBi slope of (sequence b, query head h): slopes are [heads_q] or [batch, heads_q]; 0 without.
float alibi_slope(const Tensor& slopes, std::int64_t b, std::int64_t h);

// Per-query data of a tile for the score transform, one entry per tile row.
struct TileMask {
  std::vector<float> slope2;         // ALiBi slope * log2(e)
  std::vector<float> diag;           // the row's causal diagonal (ALiBi distance), exact < 2^24
  std::vector<std::int64_t> lo, hi;  // its key band (core::key_band); padding rows are empty
  core::KeyBand first{0, -1}, last{0, -1};  // bands of the tile's first and last valid token
};
void build_tile_mask(TileMask& m, const core::ProblemDims& dims, const Tensor& slopes,
                     const QueryTile& tile, const TileShape& shape);

// How a KV block [j0, j1) meets a query tile: no visible key (skip), every key visible to every
// valid row (full: no per-element mask), or cut by the mask.
enum class BlockKind : std::uint8_t { skip, full, cut };
BlockKind classify_block(const core::MaskRule& rule, const TileMask& m, std::int64_t j0,
                         std::int64_t j1);

// The score transform in base 2 (SoftmaxState's): s2 = log2(e) * s with s from the
// flashkit::Mask rules. dot_scale and cap_log2 fold the softmax scale, softcap and log2(e).
struct ScoreRule {
  float dot_scale;  // scale * log2(e), or scale / softcap when softcap is on
  float cap_log2;   // softcap * log2(e); 0 when off
  bool alibi;
  std::int64_t prefix_len;
};
ScoreRule score_rule(const core::ProblemDims& dims, bool alibi);

// Turns rows [0, nk) of a transposed tile of raw dot products (st[j * ld + i] = q_i . k_j for
// key j0 + j) into base-2 scores; masked keys become -inf when the block is cut. With softcap,
// tanh_out[j * ld + i] receives tanh(scale * dot / softcap) (the backward's derivative needs it).
void score_tile(float* st, std::int64_t ld, std::int64_t nk, std::int64_t j0, const ScoreRule& rule,
                const TileMask& m, BlockKind kind, float* tanh_out);

}  // namespace flashkit::cpu::tiled
