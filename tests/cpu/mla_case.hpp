// One MLA test case: a small model's projections (W_UK, W_UV), a paged latent cache with
// shuffled page ids and NaN in every unused slot, absorbed queries, and the two sides of MLA's
// identity: plain multi-head attention over the expanded keys [W_UK c ; k_rope] and values W_UV c
// (the contiguous fp64 oracle), and mla_decode's latent output projected through W_UV.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "flashkit/attention.hpp"
#include "flashkit/mla.hpp"
#include "host_tensor.hpp"

namespace flashkit::testing {

struct MlaShape {
  std::int64_t heads = 8, latent = 64, rope = 16, nope = 32, dv = 24, page_size = 16;
  std::vector<std::int64_t> seq_lens{1, 45, 130};
  std::vector<std::int64_t> q_lens{1, 1, 1};
  bool packed = false;
  bool causal = true;
  DType dtype = DType::f32;  // of q and the pages (e4m3 pages take f32 queries)
  std::uint32_t seed = 7;

  std::int64_t batch() const { return std::int64_t(seq_lens.size()); }
  std::int64_t width() const { return latent + rope; }
  double scale() const { return 1.0 / std::sqrt(double(nope + rope)); }
};

// A model's projections, its cache and its queries, as values (what the pages and q hold after
// rounding) and as the tensors the calls take.
struct MlaCase {
  MlaShape s;
  std::vector<double> w_uk, w_uv;           // [heads][nope][latent], [heads][dv][latent]
  std::vector<std::vector<double>> rows;    // per sequence [len][width]: c then k_rope
  std::vector<std::vector<double>> q_nope;  // per sequence [q_len][heads][nope]
  std::vector<std::vector<double>> q_rope;  // per sequence [q_len][heads][rope]
  std::vector<std::vector<std::int32_t>> page_ids;
  std::int64_t num_pages = 0, max_pages = 0, total_q = 0;
  HostTensor pages, scale, block_table, seq_lens, q, cu_seqlens_q;

  std::int64_t q_row(std::int64_t b, std::int64_t i) const {  // packed row of query i of b
    std::int64_t row = 0;
    for (std::int64_t c = 0; c < b; ++c) row += s.q_lens[std::size_t(c)];
    return row + i;
  }
  std::vector<std::int64_t> out_shape() const {
    if (s.packed) return {total_q, s.heads, s.latent};
    return {s.batch(), s.q_lens[0], s.heads, s.latent};
  }
  MlaCache cache() const {
    MlaCache c;
    c.pages = pages;
    if (s.dtype == DType::e4m3) c.scale = scale;
    c.block_table = block_table;
    c.seq_lens = seq_lens;
    return c;
  }
  MlaDecodeArgs args(const Tensor& out, const Tensor& lse, Algo algo, int splits) const {
    MlaDecodeArgs a;
    a.q = q;
    if (s.packed) {
      a.cu_seqlens_q = cu_seqlens_q;
      a.max_seqlen_q = *std::max_element(s.q_lens.begin(), s.q_lens.end());
    }
    a.cache = cache();
    a.latent_dim = s.latent;
    a.out = out;
    a.lse = lse;
    a.softmax_scale = float(s.scale());
    a.causal = s.causal;
    a.num_splits = splits;
    a.algo = algo;
    return a;
  }
};

MlaCase make_mla_case(const MlaShape& s);
// Every sequence's rows into an e4m3 cache through mla_append, which must round value / scale
// to e4m3 (3 mantissa bits: within 2^-4 relative, or half the smallest subnormal step; a gtest
// failure otherwise); the case then holds the dequantised values.
void append_all(MlaCase& c);
// Plain MHA over the expanded keys [W_UK c ; k_rope] and values W_UV c: the contiguous fp64
// oracle. Output [total_q][heads][dv].
std::vector<double> expanded_oracle(const MlaCase& c);
// mla_decode's latent output projected through W_UV: [total_q][heads][dv].
std::vector<double> decode_projected(const MlaCase& c, Algo algo, int splits);

}  // namespace flashkit::testing
