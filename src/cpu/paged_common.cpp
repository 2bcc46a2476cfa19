#include <cstdint>
#include <vector>

#include "cpu/paged_backend.hpp"

namespace flashkit::cpu::paged {

std::vector<SeqQueries> sequence_queries(const PagedAttentionArgs& args,
                                         const core::PagedDims& dims) {
  std::vector<SeqQueries> seqs(static_cast<std::size_t>(dims.batch));
  const Tensor& lens = args.kv.seq_lens;
  const Tensor& cu = args.cu_seqlens_q;
  for (std::int64_t b = 0; b < dims.batch; ++b) {
    SeqQueries& s = seqs[static_cast<std::size_t>(b)];
    s.len_k = lens.data_as<const std::int32_t>()[b * lens.stride(0)];
    if (dims.varlen_q) {
      const auto* c = cu.data_as<const std::int32_t>();
      s.q_start = c[b * cu.stride(0)];
      s.len_q = c[(b + 1) * cu.stride(0)] - s.q_start;
    } else {
      s.q_start = 0;
      s.len_q = dims.q_len;
    }
  }
  return seqs;
}

PageRows::PageRows(const Tensor& pages, const Tensor& scales, const Tensor& block_table)
    : base_(static_cast<const char*>(pages.data())),
      dtype_(pages.dtype()),
      elem_(std::int64_t(dtype_size(pages.dtype()))),
      page_size_(pages.size(1)),
      page_shift_(0),
      stride_page_(pages.stride(0)),
      stride_slot_(pages.stride(1)),
      stride_head_(pages.stride(2)),
      scales_(scales.defined() ? scales.data_as<const float>() : nullptr),
      scale_page_(scales.defined() ? scales.stride(0) : 0),
      scale_head_(scales.defined() ? scales.stride(1) : 0),
      table_(block_table.data_as<const std::int32_t>()),
      table_b_(block_table.stride(0)),
      table_p_(block_table.stride(1)) {
  while ((std::int64_t(1) << page_shift_) < page_size_) ++page_shift_;  // a power of two
}

}  // namespace flashkit::cpu::paged
