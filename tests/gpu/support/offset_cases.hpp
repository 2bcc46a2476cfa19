// The cases every GPU kernel with a mask is held to under Mask::diagonal_offset, the shift that
// ring attention gives each chunk pair (forward: sm80, sm90, fp32; backward).
#pragma once

#include <cstdint>
#include <vector>

#include "attention_case.hpp"
#include "mask_kinds.hpp"

namespace flashkit::testing {

// Masks moved by Mask::diagonal_offset (ring attention's chunk pairs), 150 queries against 197
// keys: causal diagonals pushed past every key (all visible) and before the first (the first rows
// see none), a window and prefix-LM moved off every tile edge, ALiBi distances from the moved
// diagonal, bottom-right alignment plus an offset, and a varlen batch with empty sequences.
inline std::vector<CaseSpec> diagonal_offset_cases(DType dtype, int head_dim) {
  struct Moved {
    MaskKind mask;
    std::int64_t offset;
  };
  const Moved moved[] = {
      {MaskKind::causal_tl, 300}, {MaskKind::causal_tl, -90}, {MaskKind::causal_tl, 53},
      {MaskKind::causal_br, -20}, {MaskKind::window, 120},    {MaskKind::window, -61},
      {MaskKind::prefix, -60},    {MaskKind::alibi, 70},      {MaskKind::softcap, -1000}};
  std::vector<CaseSpec> cases;
  for (const Moved& m : moved) {
    CaseSpec s;
    s.dtype = dtype;
    s.seqlens_q = {150};
    s.seqlens_k = {197};
    s.heads_q = 4;
    s.heads_kv = 2;
    s.head_dim = head_dim;
    s.seed = unsigned(head_dim + 3 * cases.size());
    apply_mask(s, m.mask);
    s.diagonal_offset = m.offset;
    cases.push_back(s);
  }
  CaseSpec v;
  v.dtype = dtype;
  v.varlen = true;
  v.seqlens_q = {0, 77, 130, 1};
  v.seqlens_k = {5, 0, 200, 129};
  v.heads_q = 4;
  v.heads_kv = 2;
  v.head_dim = head_dim;
  v.causal = true;
  v.align = CausalAlign::top_left;
  v.diagonal_offset = 45;
  cases.push_back(v);
  return cases;
}

}  // namespace flashkit::testing
