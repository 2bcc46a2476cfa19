// The tensor-core backward's dQ accumulator layout (bwd/bwd_params.hpp), on the host: every
// (sequence, head, query, column) has its own float inside the allocation, with and without
// varlen (empty and odd-length sequences, a packed tensor longer than the sequences); and the
// dK/dV kernel's addressing holds: a warp's 8 rows x 8 columns of a fragment half are 64
// contiguous floats on a 64-float boundary, at base + 8 g + 2 t from one base per row group.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cuda/bwd/bwd_params.hpp"

namespace flashkit::testing {
namespace {

using cuda::BwdParams;

BwdParams params(int batch, int heads_q, int seqlen_q, int head_dim,
                 const std::vector<std::int32_t>* cu_seqlens_q, std::int64_t q_tokens) {
  BwdParams p{};
  p.f.batch = batch;
  p.f.heads_q = heads_q;
  p.f.heads_kv = heads_q;
  p.f.seqlen_q = seqlen_q;
  p.f.head_dim = head_dim;
  p.f.cu_seqlens_q = cu_seqlens_q != nullptr ? cu_seqlens_q->data() : nullptr;
  p.f.cu_seqlens_k = p.f.cu_seqlens_q;  // sequence_span reads both; only q's matter here
  p.q_tokens = q_tokens;
  return p;
}

void check_layout(const BwdParams& p) {
  const std::int64_t floats = cuda::dq_accum_floats(p);
  std::vector<int> owners(std::size_t(floats), 0);
  const int d = p.f.head_dim;
  for (int b = 0; b < p.f.batch; ++b) {
    const core::SeqSpan sp = cuda::sequence_span(p.f, b);
    const std::int64_t first = cuda::dq_accum_first_row(p, b, sp);
    ASSERT_EQ(first % 8, 0) << "sequence " << b;
    for (int h = 0; h < p.f.heads_q; ++h) {
      for (std::int64_t i = 0; i < sp.len_q; ++i) {
        const std::int64_t group = i / 8 * 8;
        const std::int64_t base = (h * cuda::dq_accum_rows(p) + first + group) * d;
        for (int e = 0; e < d; ++e) {
          const std::int64_t off = cuda::dq_accum_offset(p, b, sp, i, h, e);
          ASSERT_GE(off, 0);
          ASSERT_LT(off, floats) << "b " << b << " h " << h << " i " << i << " e " << e;
          ++owners[std::size_t(off)];
          ASSERT_EQ(owners[std::size_t(off)], 1) << "b " << b << " h " << h << " i " << i;
          // The kernel's lane (g, t) = (i % 8, (e % 8) / 2) adds at base + e / 8 * 64 + 8 g +
          // 2 t (+ 1): one 64-float run per 8 x 8 block.
          ASSERT_EQ(off, base + e / 8 * 64 + (i - group) * 8 + e % 8);
          ASSERT_EQ((base + e / 8 * 64) % 64, 0);
        }
      }
    }
  }
}

TEST(DqAccumLayout, FixedLengthsGetDisjointFloats) {
  for (const int seqlen : {1, 7, 8, 13, 64}) {
    SCOPED_TRACE(seqlen);
    check_layout(params(3, 2, seqlen, 32, nullptr, 3 * std::int64_t(seqlen)));
  }
}

TEST(DqAccumLayout, VarlenSequencesNeverShareARowGroup) {
  // Empty, odd and 8-aligned sequences at unaligned starts; the packed tensor has 3 spare tokens.
  const std::vector<std::int32_t> cu = {0, 5, 5, 22, 40, 41, 49};
  check_layout(params(6, 3, 18, 64, &cu, 52));
}

TEST(DqAccumLayout, SizeIsTheTokensPlusOneGroupPerSequence) {
  const std::vector<std::int32_t> cu = {0, 1, 2};
  EXPECT_EQ(cuda::dq_accum_floats(params(2, 4, 1, 32, &cu, 2)), (8 + 16) * 4 * 32);
  EXPECT_EQ(cuda::dq_accum_floats(params(1, 1, 0, 64, nullptr, 0)), 8 * 64);
}

// A sequence's last group of 8 rows may be partly past its end; whatever lands there (a bulk
// reduction adds whole groups) must hit no other sequence's rows and stay inside the allocation.
TEST(DqAccumLayout, EverySequencesWholeGroupsAreItsOwn) {
  const std::vector<std::int32_t> cu = {0, 1, 9, 9, 26, 33, 40};
  for (const BwdParams& p : {params(6, 2, 17, 32, &cu, 40), params(5, 2, 13, 32, nullptr, 65),
                             params(4, 2, 8, 32, nullptr, 32)}) {
    std::int64_t next_free = 0;
    for (int b = 0; b < p.f.batch; ++b) {
      const core::SeqSpan sp = cuda::sequence_span(p.f, b);
      const std::int64_t first = cuda::dq_accum_first_row(p, b, sp);
      EXPECT_GE(first, next_free) << "sequence " << b;
      next_free = first + (sp.len_q + 7) / 8 * 8;
    }
    EXPECT_LE(next_free, cuda::dq_accum_rows(p));
  }
}

}  // namespace
}  // namespace flashkit::testing
