// A validated paged-attention call reduced to plain numbers (core/validate_paged.cpp makes it).
#pragma once

#include <cstdint>

#include "core/mask_rules.hpp"
#include "flashkit/paged.hpp"

namespace flashkit::core {

struct PagedDims {
  std::int64_t batch = 0;
  std::int64_t q_len = 0;  // tokens per sequence; max_seqlen_q when packed (varlen)
  bool varlen_q = false;
  std::int64_t heads_q = 0, heads_kv = 0;
  std::int64_t head_dim = 0, head_dim_v = 0;
  std::int64_t num_pages = 0, page_size = 0, max_pages = 0;  // max_pages: block_table columns
  bool fp8_kv = false;                                       // e4m3 pages with k_scale / v_scale
  double scale = 0.0;
  MaskRule mask;
  int num_splits = 1;  // resolved: the plan's choice when args.num_splits == 0
  std::int64_t group() const { return heads_q / heads_kv; }
};

struct AppendDims {
  std::int64_t batch = 0, new_tokens = 0, heads_kv = 0, head_dim = 0, head_dim_v = 0;
  std::int64_t num_pages = 0, page_size = 0, max_pages = 0;
  bool fp8_kv = false;
};

}  // namespace flashkit::core
