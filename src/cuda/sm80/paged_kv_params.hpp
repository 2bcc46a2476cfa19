// The kernel parameters of the sm80 forward's paged K/V source (kv_source.cuh), plain data the
// host glue (cuda/paged_fwd.cpp) fills. Strides in elements.
#pragma once

#include <cstdint>

namespace flashkit::cuda::sm80 {

struct PagedKvParams {
  // [num_pages, page_size, heads_kv, d]
  const void* k_pages;
  const void* v_pages;
  std::int64_t k_page_stride, k_slot_stride, k_head_stride;  // elements
  std::int64_t v_page_stride, v_slot_stride, v_head_stride;
  const std::int32_t* block_table;  // [sequences, max_pages]
  std::int64_t table_batch, table_page;
  const std::int32_t* seq_lens;
  std::int64_t seq_lens_stride;
  int page_shift;  // log2(page_size)
  // Kernel sequence b reads split b % key_splits of cache sequence b / key_splits: keys
  // [s * split_keys, (s + 1) * split_keys). key_splits == 1: the whole sequence.
  int key_splits;
  int split_keys;
  // GQA packing (kv_source.cuh): sequence row R is token R / q_pack of query head
  // head * q_pack + R % q_pack, where head = blockIdx.y (p.heads_q == p.heads_kv). 1: none.
  int q_pack;
};

}  // namespace flashkit::cuda::sm80
