// The forward cases every GPU forward kernel (sm80, sm90) is held to, so their grids stay the
// same: a dense case (150 queries against 197 keys: neither a multiple of 64 or 128, and
// bottom-right causal shifts the diagonal by 47), a packed varlen batch (empty query and key
// sequences, a single query, lengths just past a tile, and len_q > len_k), more queries than
// keys under a causal mask, and rows padded to strides that are not the contiguous ones.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "attention_case.hpp"
#include "gpu_forward.hpp"
#include "mask_kinds.hpp"

namespace flashkit::testing {

using GridParam = std::tuple<DType, int, MaskKind, int>;  // dtype, head dim, mask, q per kv head
using VarlenParam = std::tuple<DType, int, MaskKind>;

inline CaseSpec grid_case(const GridParam& param) {
  const auto [dtype, d, mask, group] = param;
  CaseSpec s;
  s.dtype = dtype;
  s.seqlens_q = {150, 150};
  s.seqlens_k = {197, 197};
  s.heads_q = 8;
  s.heads_kv = 8 / group;
  s.head_dim = d;
  s.seed = unsigned(d * 31 + group);
  apply_mask(s, mask);
  return s;
}

inline CaseSpec varlen_case(const VarlenParam& param) {
  const auto [dtype, d, mask] = param;
  CaseSpec s;
  s.dtype = dtype;
  s.varlen = true;
  s.seqlens_q = {0, 77, 130, 1, 260};
  s.seqlens_k = {5, 0, 200, 129, 64};
  s.heads_q = 4;
  s.heads_kv = 2;
  s.head_dim = d;
  s.seed = unsigned(d + 7);
  apply_mask(s, mask);
  return s;
}

// One sequence of n queries and n keys, the CaseSpec defaults otherwise (2 heads).
inline CaseSpec square_case(DType dtype, std::int64_t n, int head_dim, bool causal) {
  CaseSpec s;
  s.dtype = dtype;
  s.seqlens_q = {n};
  s.seqlens_k = {n};
  s.head_dim = head_dim;
  s.causal = causal;
  return s;
}

// 300 queries, 100 keys, causal with `align`: top-left, every row from 99 on sees every key;
// bottom-right, the first 200 rows see none (O = 0, lse = -inf).
inline CaseSpec more_queries_than_keys_case(CausalAlign align, int head_dim) {
  CaseSpec s;
  s.dtype = DType::bf16;
  s.seqlens_q = {300};
  s.seqlens_k = {100};
  s.head_dim = head_dim;
  s.causal = true;
  s.align = align;
  return s;
}

// Causal GQA (4 query / 2 KV heads), dense or varlen, with q, k and v rows 8 elements wider than
// their content.
inline CaseData padded_rows_case(bool varlen, int head_dim) {
  CaseSpec s;
  s.dtype = DType::f16;
  s.varlen = varlen;
  s.seqlens_q = varlen ? std::vector<std::int64_t>{70, 3} : std::vector<std::int64_t>{70, 70};
  s.seqlens_k = varlen ? std::vector<std::int64_t>{150, 40} : std::vector<std::int64_t>{150, 150};
  s.heads_q = 4;
  s.heads_kv = 2;
  s.head_dim = head_dim;
  s.causal = true;
  CaseData c = make_case(s);
  c.q = padded_copy(c.q);
  c.k = padded_copy(c.k);
  c.v = padded_copy(c.v);
  return c;
}

inline std::string grid_name(const ::testing::TestParamInfo<GridParam>& info) {
  const auto [dtype, d, mask, group] = info.param;
  return std::string(dtype_name(dtype)) + "_d" + std::to_string(d) + "_" + mask_name(mask) + "_g" +
         std::to_string(group);
}

inline std::string varlen_name(const ::testing::TestParamInfo<VarlenParam>& info) {
  const auto [dtype, d, mask] = info.param;
  return std::string(dtype_name(dtype)) + "_d" + std::to_string(d) + "_" + mask_name(mask);
}

}  // namespace flashkit::testing
