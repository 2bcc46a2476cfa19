// The CPU backend of paged attention and append_kv (validated calls, core/validate.hpp), and what
// its oracle and fast path share: where each sequence's queries are, and where a cached token's
// K/V row lives.
#pragma once

#include <cstdint>
#include <vector>

#include "core/paged_problem.hpp"
#include "core/validate.hpp"
#include "flashkit/paged.hpp"

namespace flashkit::cpu {

// Algo::reference runs the oracle; automatic the fast path (v1 or split-K per dims.num_splits).
void paged_attention(const PagedAttentionArgs& args, const core::PagedDims& dims);
void append_kv(const AppendKVArgs& args, const core::AppendDims& dims);

// The fp64 oracle: plain loops over the block table, two-pass softmax in double of the values as
// stored (e4m3 times its page's scale, exactly).
void paged_reference(const PagedAttentionArgs& args, const core::PagedDims& dims);
// The fp32 fast path. One task per (sequence, KV head, split) runs every query head of the GQA
// group against each K/V block it loads. One split (v1) writes out and lse directly; more (v2)
// write partial (o, lse) per split to the workspace and stage 2 merges them with merge_states.
void paged_fast(const PagedAttentionArgs& args, const core::PagedDims& dims);

namespace paged {

// Sequence b's queries: rows q_start .. q_start + len_q of the packed dim (0.. of its own batch
// row otherwise), the last len_q of its len_k cached tokens.
struct SeqQueries {
  std::int64_t q_start, len_q, len_k;
};
std::vector<SeqQueries> sequence_queries(const PagedAttentionArgs& args,
                                         const core::PagedDims& dims);

// One of k_pages / v_pages with its block table: row(b, t, h) addresses the head_dim elements of
// token t of sequence b, KV head h; scale(b, t, h) is its page's dequantisation factor (1 for
// pages that are not e4m3).
class PageRows {
 public:
  PageRows(const Tensor& pages, const Tensor& scales, const Tensor& block_table);
  std::int64_t page_of(std::int64_t b, std::int64_t t) const {
    return table_[b * table_b_ + (t >> page_shift_) * table_p_];
  }
  const char* row(std::int64_t page, std::int64_t t, std::int64_t h) const {
    const std::int64_t slot = t & (page_size_ - 1);
    return base_ + (page * stride_page_ + slot * stride_slot_ + h * stride_head_) * elem_;
  }
  float scale(std::int64_t page, std::int64_t h) const {
    return scales_ ? scales_[page * scale_page_ + h * scale_head_] : 1.0f;
  }
  DType dtype() const { return dtype_; }

 private:
  const char* base_;
  DType dtype_;
  std::int64_t elem_, page_size_, page_shift_;
  std::int64_t stride_page_, stride_slot_, stride_head_;
  const float* scales_;
  std::int64_t scale_page_, scale_head_;
  const std::int32_t* table_;
  std::int64_t table_b_, table_p_;
};

// One task of the fast path: the queries of sequence b for every query head of KV head hk's
// group against the keys [k0, k1) of the sequence. Row r = g * len_q + i (head hk * group + g,
// query i) gets its normalised output at o[r * head_dim_v] and its natural-log lse at lse[r]; a
// row that sees no key there gets o = 0 and lse = -inf (merge_states then ignores it).
void attend_keys(const PagedAttentionArgs& args, const core::PagedDims& dims, const SeqQueries& seq,
                 std::int64_t b, std::int64_t hk, std::int64_t k0, std::int64_t k1, float* o,
                 float* lse);

}  // namespace paged

}  // namespace flashkit::cpu
