// The naive three-step forward, the first step of the attention lineage and the baseline the
// flash paths are benchmarked against. It does what the textbook formula says, in fp32:
//   step 1: S = scale * Q K^T for every (batch, head), scores shaped and masked (-inf),
//   step 2: P = softmax(S) row by row into a second buffer,
//   step 3: O = P V.
// S and P are materialised whole, 2 * batch * heads * Nq * Nk floats: that memory traffic is what
// the lineage measures, so nothing here fuses the steps or skips masked blocks.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "core/cost_model.hpp"
#include "core/numeric.hpp"
#include "core/softmax_state.hpp"
#include "cpu/cpu_backend.hpp"
#include "cpu/parallel.hpp"
#include "cpu/tiled_common.hpp"
#include "cpu/tiled_math.hpp"
#include "flashkit/error.hpp"

namespace flashkit::cpu {

namespace {

using core::element_offset;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Rows per task: enough tasks to balance two to dozens of threads at N = 512.
constexpr std::int64_t kRowBlock = 32;
// Keys per chunk: a chunk of K^T or V (64 KiB at d = 64) stays in L2 while a row block uses it.
// A multiple of kLanes.
constexpr std::int64_t kKeyChunk = 256;
// The width of the register tiles (one AVX-512 vector) and of the partial results of the row
// reductions, so the compiler vectorises them without reassociating one serial chain.
constexpr std::int64_t kLanes = 16;

std::size_t sz(std::int64_t v) {
  return static_cast<std::size_t>(v);
}

std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f GiB", bytes / double(1ull << 30));
  return text;
}

// fp32 copies of the inputs, packed per head: Q [b, h, Nq, d], K transposed [b, hk, d, Nk] (so
// step 1's inner loop runs over keys, independent lanes) and V [b, hk, Nk, dv].
struct Workspace {
  std::unique_ptr<float[]> q, kt, v;
  std::unique_ptr<float[]> s, p;  // [b, h, Nq, Nk] each
};

Workspace allocate(const core::ProblemDims& d) {
  const core::AttentionSize size{d.batch,    d.heads_q,  d.seqlen_q,
                                 d.seqlen_k, d.head_dim, d.mask.causal};
  const double bytes = core::naive_workspace_bytes(size, sizeof(float));
  const auto fail = [&](const std::string& got) {
    throw Error("algo", "naive workspace of " + gib(bytes) + " to fit in memory",
                got + " (Algo::fa2 needs no workspace)");
  };
  if (bytes >= 0x1p62) fail("a size beyond the address space");  // before int64 products overflow
  const std::size_t scores = sz(d.batch * d.heads_q * d.seqlen_q * d.seqlen_k);
  Workspace w;
  try {
    w.q.reset(new float[sz(d.batch * d.heads_q * d.seqlen_q * d.head_dim)]);
    w.kt.reset(new float[sz(d.batch * d.heads_kv * d.seqlen_k * d.head_dim)]);
    w.v.reset(new float[sz(d.batch * d.heads_kv * d.seqlen_k * d.head_dim_v)]);
    w.s.reset(new float[scores]);
    w.p.reset(new float[scores]);
  } catch (const std::bad_alloc&) {
    fail("an allocation failure");
  }
  return w;
}

// Reads `rows` tokens of one (sequence, head) into dst, row-major [rows, dim] or, transposed,
// [dim, ld] (the column for token i at dst[e * ld + i]).
void pack(const Tensor& t, const core::TokenLayout& lay, std::int64_t b, std::int64_t start,
          std::int64_t rows, std::int64_t h, std::int64_t dim, bool transposed, std::int64_t ld,
          float* dst) {
  for (std::int64_t i = 0; i < rows; ++i) {
    const std::int64_t base = element_offset(lay, b, start, i, h);
    for (std::int64_t e = 0; e < dim; ++e) {
      const float x = float(core::load_as_double(t.data(), t.dtype(), base + e));
      dst[transposed ? e * ld + i : i * dim + e] = x;
    }
  }
}

float row_max(const float* x, std::int64_t n) {
  float part[kLanes];
  for (float& m : part) m = kNegInf;
  std::int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (std::int64_t l = 0; l < kLanes; ++l) part[l] = std::max(part[l], x[j + l]);
  }
  float m = kNegInf;
  for (; j < n; ++j) m = std::max(m, x[j]);
  for (float pm : part) m = std::max(m, pm);
  return m;
}

float row_sum(const float* x, std::int64_t n) {
  float part[kLanes] = {};
  std::int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (std::int64_t l = 0; l < kLanes; ++l) part[l] += x[j + l];
  }
  float s = 0.0f;
  for (; j < n; ++j) s += x[j];
  for (float ps : part) s += ps;
  return s;
}

// Everything the three steps share about one call.
struct Plan {
  const AttentionArgs& args;
  const core::ProblemDims& d;
  std::vector<core::SeqSpan> spans;
  Workspace w;
  std::int64_t row_blocks;  // per (batch, head)

  std::size_t slab(std::int64_t b, std::int64_t h) const {
    return sz((b * d.heads_q + h) * d.seqlen_q) * sz(d.seqlen_k);
  }
  float* kt(std::int64_t b, std::int64_t hk) const {
    return w.kt.get() + sz((b * d.heads_kv + hk) * d.head_dim * d.seqlen_k);
  }
  float* v(std::int64_t b, std::int64_t hk) const {
    return w.v.get() + sz((b * d.heads_kv + hk) * d.seqlen_k * d.head_dim_v);
  }
  // Runs body(b, h, first row, end row) over every row block of every (batch, head).
  template <typename Body>
  void for_row_blocks(const Body& body) const {
    parallel_for(d.batch * d.heads_q * row_blocks, [&](std::int64_t task) {
      const std::int64_t bh = task / row_blocks, blk = task % row_blocks;
      const std::int64_t b = bh / d.heads_q, h = bh % d.heads_q;
      const std::int64_t len_q = spans[sz(b)].len_q;
      const std::int64_t i0 = blk * kRowBlock, i1 = std::min(len_q, i0 + kRowBlock);
      if (i0 < i1) body(b, h, i0, i1);
    });
  }
};

void pack_inputs(Plan& pl) {
  const auto& d = pl.d;
  const auto& a = pl.args;
  const auto lq = core::token_layout(a.q, d.varlen), lk = core::token_layout(a.k, d.varlen),
             lv = core::token_layout(a.v, d.varlen);
  parallel_for(d.batch * d.heads_q, [&](std::int64_t task) {
    const std::int64_t b = task / d.heads_q, h = task % d.heads_q;
    const core::SeqSpan& sp = pl.spans[sz(b)];
    float* q = pl.w.q.get() + sz((b * d.heads_q + h) * d.seqlen_q * d.head_dim);
    pack(a.q, lq, b, sp.q_start, sp.len_q, h, d.head_dim, false, 0, q);
    if (h % d.group() != 0) return;  // one packing per KV head
    const std::int64_t hk = h / d.group();
    pack(a.k, lk, b, sp.k_start, sp.len_k, hk, d.head_dim, true, d.seqlen_k, pl.kt(b, hk));
    pack(a.v, lv, b, sp.k_start, sp.len_k, hk, d.head_dim_v, false, 0, pl.v(b, hk));
  });
}

// S[r][j0 + l] = q_r . k_{j0 + l} for kRows rows and kLanes keys: the accumulators stay in
// registers over the whole head dim and every K^T load serves kRows rows.
template <int kRows>
void score_tile(const float* q, std::int64_t dim, const float* kt, std::int64_t ld_kt,
                std::int64_t j0, float* s, std::int64_t ld_s) {
  float acc[kRows][kLanes] = {};
  for (std::int64_t e = 0; e < dim; ++e) {
    const float* ke = kt + e * ld_kt + j0;
    // Unrolled rows leave the lanes loop as the one to vectorise (GCC otherwise vectorises
    // over e with shuffles, several times slower).
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const float qe = q[r * dim + e];
      for (std::int64_t l = 0; l < kLanes; ++l) acc[r][l] = tiled::fmadd(qe, ke[l], acc[r][l]);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (std::int64_t l = 0; l < kLanes; ++l) s[r * ld_s + j0 + l] = acc[r][l];
  }
}

// q_r . k_j one key at a time, for the keys past the last full kLanes group.
void score_tail(const float* q, std::int64_t rows, std::int64_t dim, const float* kt,
                std::int64_t ld_kt, std::int64_t j0, std::int64_t j1, float* s, std::int64_t ld_s) {
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t j = j0; j < j1; ++j) {
      float acc = 0.0f;
      for (std::int64_t e = 0; e < dim; ++e)
        acc = tiled::fmadd(q[r * dim + e], kt[e * ld_kt + j], acc);
      s[r * ld_s + j] = acc;
    }
  }
}

// Step 1: S = scale * Q K^T, then softcap, ALiBi and the mask (-inf where hidden).
void scores(Plan& pl) {
  const auto& d = pl.d;
  const core::MaskRule& rule = d.mask;
  const std::int64_t dim = d.head_dim, ld = d.seqlen_k;
  pl.for_row_blocks([&](std::int64_t b, std::int64_t h, std::int64_t i0, std::int64_t i1) {
    const core::SeqSpan& sp = pl.spans[sz(b)];
    const std::int64_t nk = sp.len_k, shift = core::diagonal_shift(rule, sp.len_q, nk);
    const float* q = pl.w.q.get() + sz((b * d.heads_q + h) * d.seqlen_q * dim);
    const float* kt = pl.kt(b, h / d.group());
    float* s = pl.w.s.get() + pl.slab(b, h);
    const float slope = tiled::alibi_slope(pl.args.mask.alibi_slopes, b, h);
    const std::int64_t full = nk / kLanes * kLanes;
    for (std::int64_t j0 = 0; j0 < full; j0 += kKeyChunk) {
      const std::int64_t j1 = std::min(full, j0 + kKeyChunk);
      std::int64_t i = i0;
      for (; i + 4 <= i1; i += 4) {
        for (std::int64_t j = j0; j < j1; j += kLanes) {
          score_tile<4>(q + i * dim, dim, kt, ld, j, s + i * ld, ld);
        }
      }
      for (; i < i1; ++i) {
        for (std::int64_t j = j0; j < j1; j += kLanes) {
          score_tile<1>(q + i * dim, dim, kt, ld, j, s + i * ld, ld);
        }
      }
    }
    score_tail(q + i0 * dim, i1 - i0, dim, kt, ld, full, nk, s + i0 * ld, ld);
    for (std::int64_t i = i0; i < i1; ++i) {
      float* row = s + i * ld;
      const std::int64_t diag = i + shift;
      for (std::int64_t j = 0; j < nk; ++j) row[j] *= d.scale;
      if (rule.softcap > 0) {
        for (std::int64_t j = 0; j < nk; ++j) {
          row[j] = rule.softcap * std::tanh(row[j] / rule.softcap);
        }
      }
      if (slope != 0.0f) {
        for (std::int64_t j = 0; j < nk; ++j) row[j] += core::alibi_bias(slope, diag, j);
      }
      if (!core::masks_anything(rule)) continue;  // the prefix-LM rule only ever unhides keys
      for (std::int64_t j = 0; j < nk; ++j) {
        if (!core::key_visible(rule, diag, j, nk)) row[j] = kNegInf;
      }
    }
  });
}

// Step 2: P = softmax(S) per row; a row that sees no key gets P = 0 and lse = -inf.
void softmax(Plan& pl) {
  const auto& d = pl.d;
  const bool want_lse = pl.args.lse.defined();
  const auto ll = want_lse ? core::lse_layout(pl.args.lse, d.varlen) : core::TokenLayout{};
  const float log2e = float(core::kLog2e);
  pl.for_row_blocks([&](std::int64_t b, std::int64_t h, std::int64_t i0, std::int64_t i1) {
    const core::SeqSpan& sp = pl.spans[sz(b)];
    const std::int64_t nk = sp.len_k;
    for (std::int64_t i = i0; i < i1; ++i) {
      const std::size_t at = pl.slab(b, h) + sz(i * d.seqlen_k);
      const float* s = pl.w.s.get() + at;
      float* p = pl.w.p.get() + at;
      const float m = row_max(s, nk);
      float lse = kNegInf;
      if (m == kNegInf) {
        for (std::int64_t j = 0; j < nk; ++j) p[j] = 0.0f;
      } else {
        // exp(s - m) as 2^((s - m) log2 e): the polynomial vectorises, libm's expf does not.
        for (std::int64_t j = 0; j < nk; ++j) p[j] = tiled::exp2_fast((s[j] - m) * log2e);
        const float l = row_sum(p, nk);
        const float inv = 1.0f / l;
        for (std::int64_t j = 0; j < nk; ++j) p[j] *= inv;
        lse = m + std::log(l);
      }
      if (want_lse) pl.args.lse.data_as<float>()[element_offset(ll, b, sp.q_start, i, h)] = lse;
    }
  });
}

// o[r][e0 + l] += sum_j P[r][j] V[j][e0 + l] over keys [j0, j1), for kRows rows and kLanes
// output dims held in registers; every V load serves kRows rows.
template <int kRows>
void output_tile(const float* p, std::int64_t ld_p, const float* v, std::int64_t dv,
                 std::int64_t j0, std::int64_t j1, std::int64_t e0, float* o) {
  float acc[kRows][kLanes];
  for (int r = 0; r < kRows; ++r) {
    for (std::int64_t l = 0; l < kLanes; ++l) acc[r][l] = o[r * dv + e0 + l];
  }
  for (std::int64_t j = j0; j < j1; ++j) {
    const float* vj = v + j * dv + e0;
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const float pj = p[r * ld_p + j];
      for (std::int64_t l = 0; l < kLanes; ++l) acc[r][l] = tiled::fmadd(pj, vj[l], acc[r][l]);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (std::int64_t l = 0; l < kLanes; ++l) o[r * dv + e0 + l] = acc[r][l];
  }
}

// The same one output dim at a time, for the dims past the last full kLanes group.
void output_tail(const float* p, std::int64_t ld_p, std::int64_t rows, const float* v,
                 std::int64_t dv, std::int64_t j0, std::int64_t j1, std::int64_t e0, float* o) {
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t e = e0; e < dv; ++e) {
      float acc = o[r * dv + e];
      for (std::int64_t j = j0; j < j1; ++j)
        acc = tiled::fmadd(p[r * ld_p + j], v[j * dv + e], acc);
      o[r * dv + e] = acc;
    }
  }
}

// Step 3: O = P V, written in out's dtype.
void output(Plan& pl) {
  const auto& d = pl.d;
  const Tensor& out = pl.args.out;
  const auto lo = core::token_layout(out, d.varlen);
  const std::int64_t dv = d.head_dim_v, ld = d.seqlen_k, full = dv / kLanes * kLanes;
  pl.for_row_blocks([&](std::int64_t b, std::int64_t h, std::int64_t i0, std::int64_t i1) {
    const core::SeqSpan& sp = pl.spans[sz(b)];
    const std::int64_t nk = sp.len_k;
    const float* p = pl.w.p.get() + pl.slab(b, h);
    const float* v = pl.v(b, h / d.group());
    std::unique_ptr<float[]> acc(new float[sz((i1 - i0) * dv)]());
    for (std::int64_t j0 = 0; j0 < nk; j0 += kKeyChunk) {
      const std::int64_t j1 = std::min(nk, j0 + kKeyChunk);
      std::int64_t i = i0;
      for (; i + 4 <= i1; i += 4) {
        for (std::int64_t e = 0; e < full; e += kLanes) {
          output_tile<4>(p + i * ld, ld, v, dv, j0, j1, e, acc.get() + (i - i0) * dv);
        }
      }
      for (; i < i1; ++i) {
        for (std::int64_t e = 0; e < full; e += kLanes) {
          output_tile<1>(p + i * ld, ld, v, dv, j0, j1, e, acc.get() + (i - i0) * dv);
        }
      }
      output_tail(p + i0 * ld, ld, i1 - i0, v, dv, j0, j1, full, acc.get());
    }
    for (std::int64_t i = i0; i < i1; ++i) {
      const std::int64_t base = element_offset(lo, b, sp.q_start, i, h);
      for (std::int64_t e = 0; e < dv; ++e) {
        core::store_from_double(out.data(), out.dtype(), base + e, acc[sz((i - i0) * dv + e)]);
      }
    }
  });
}

}  // namespace

void naive_forward(const AttentionArgs& args, const core::ProblemDims& dims) {
  Plan pl{args, dims, sequence_spans(args, dims), allocate(dims),
          (dims.seqlen_q + kRowBlock - 1) / kRowBlock};
  pack_inputs(pl);
  scores(pl);
  softmax(pl);
  output(pl);
}

}  // namespace flashkit::cpu
