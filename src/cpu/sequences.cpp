#include <cstdint>
#include <vector>

#include "cpu/cpu_backend.hpp"

namespace flashkit::cpu {

std::vector<core::SeqSpan> sequence_spans(const AttentionProblem& p, const core::ProblemDims& d) {
  std::vector<core::SeqSpan> spans(static_cast<std::size_t>(d.batch));
  for (std::int64_t b = 0; b < d.batch; ++b) {
    core::SeqSpan& s = spans[static_cast<std::size_t>(b)];
    if (d.varlen) {
      const auto* cq = p.varlen.cu_seqlens_q.data_as<const std::int32_t>();
      const auto* ck = p.varlen.cu_seqlens_k.data_as<const std::int32_t>();
      const std::int64_t sq = p.varlen.cu_seqlens_q.stride(0);
      const std::int64_t sk = p.varlen.cu_seqlens_k.stride(0);
      s.q_start = cq[b * sq];
      s.len_q = cq[(b + 1) * sq] - s.q_start;
      s.k_start = ck[b * sk];
      s.len_k = ck[(b + 1) * sk] - s.k_start;
    } else {
      s = {0, d.seqlen_q, 0, d.seqlen_k};
    }
  }
  return spans;
}

}  // namespace flashkit::cpu
