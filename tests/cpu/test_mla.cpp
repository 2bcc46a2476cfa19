// MLA decode and append on the CPU. The main check is MLA's own identity: decoding in the
// absorbed form (queries projected through W_UK, values left in latent space and projected
// through W_UV afterwards) gives what plain multi-head attention over the expanded per-head keys
// [W_UK c ; k_rope] and values W_UV c gives, computed by the contiguous fp64 oracle. The cache
// uses shuffled page ids with NaN in every unused slot, and outputs are poisoned.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "expect_error.hpp"
#include "flashkit/mla.hpp"
#include "host_tensor.hpp"
#include "mla_case.hpp"
#include "paged_case.hpp"

namespace flashkit::testing {
namespace {

// The oracle path differs from the expanded one by the absorbed queries' rounding to f32, the
// fp32 fast path by its accumulation too: measured at most 2.0e-8 and 6.6e-8 over these tests.
constexpr double kReferenceTol = 2e-7;
constexpr double kFastTol = 1e-6;

// bf16 queries hold W_UK^T q_nope rounded to bf16, which no expanded query reproduces: the fast
// path is checked against the oracle path on the same stored values instead.
void check_against_oracle_path(const MlaShape& shape) {
  const MlaCase c = make_mla_case(shape);
  const std::vector<double> want = decode_projected(c, Algo::reference, 1);
  for (int splits : {1, 3}) {
    const double err = max_abs_diff(decode_projected(c, Algo::automatic, splits), want);
    EXPECT_LE(err, kFastTol) << "fast path, num_splits " << splits;
  }
}

void check_identity(const MlaShape& shape) {
  MlaCase c = make_mla_case(shape);
  if (shape.dtype == DType::e4m3) append_all(c);
  const std::vector<double> want = expanded_oracle(c);
  const double ref_err = max_abs_diff(decode_projected(c, Algo::reference, 1), want);
  EXPECT_LE(ref_err, kReferenceTol) << "oracle path";
  for (int splits : {1, 3}) {
    const double err = max_abs_diff(decode_projected(c, Algo::automatic, splits), want);
    EXPECT_LE(err, kFastTol) << "fast path, num_splits " << splits;
  }
}

TEST(MlaDecode, AbsorbedEqualsExpandedMultiHeadAttention) {
  check_identity(MlaShape{});
}

TEST(MlaDecode, SeveralQueriesCausalAndNot) {
  MlaShape s;
  s.q_lens = {2, 2, 2};
  s.seq_lens = {2, 45, 130};
  check_identity(s);
  s.causal = false;
  s.seed = 8;
  check_identity(s);
}

TEST(MlaDecode, PackedQueriesOfDifferentLengthsAndPageSizeOne) {
  MlaShape s;
  s.packed = true;
  s.page_size = 1;
  s.seq_lens = {3, 17, 60, 5};
  s.q_lens = {1, 4, 0, 5};  // one sequence adds nothing; one is all queries
  check_identity(s);
}

TEST(MlaDecode, DeepSeekWidths) {
  MlaShape s;  // 512 latent + 64 rope per row; 128 nope + 64 rope per expanded key
  s.heads = 4;
  s.latent = 512;
  s.rope = 64;
  s.nope = 128;
  s.dv = 128;
  s.page_size = 64;
  s.seq_lens = {70, 200};
  s.q_lens = {1, 1};
  check_identity(s);
}

TEST(MlaDecode, Bf16AndE4m3Caches) {
  MlaShape s;
  s.dtype = DType::bf16;
  check_against_oracle_path(s);
  s.dtype = DType::e4m3;
  s.seed = 9;
  check_identity(s);
}

TEST(MlaDecode, LseMatchesTheOracleWithAnEmptySequence) {
  MlaShape s;
  s.packed = true;
  s.causal = false;
  s.seq_lens = {0, 40};
  s.q_lens = {0, 2};
  const MlaCase c = make_mla_case(s);
  HostTensor out(DType::f32, c.out_shape()), lse(DType::f32, {s.heads, c.total_q});
  HostTensor out_ref(DType::f64, c.out_shape()), lse_ref(DType::f32, {s.heads, c.total_q});
  out.poison();
  lse.poison();
  out_ref.poison();
  lse_ref.poison();
  mla_decode(c.args(out, lse, Algo::automatic, 0));
  mla_decode(c.args(out_ref, lse_ref, Algo::reference, 0));
  EXPECT_LE(max_abs_diff(lse.values(), lse_ref.values()), 1e-5);
  EXPECT_LE(max_abs_diff(out.values(), out_ref.values()), kFastTol);
}

// --- append -----------------------------------------------------------------------------------

TEST(MlaAppend, WritesRowsAtTheirSlotsAndNothingElse) {
  MlaShape s;
  s.seq_lens = {5, 20};
  s.q_lens = {1, 1};
  s.page_size = 4;
  MlaCase c = make_mla_case(s);
  const std::vector<double> before = c.pages.values();
  HostTensor rows(DType::f32, {2, 3, s.width()}), start(DType::i32, {2});
  std::mt19937 rng(11);
  rows.fill_random(rng);
  start.set_values(
      {2.0, 17.0});  // sequence 0: tokens 2..4; sequence 1: 17..19 (page 4, slots 1..3)
  MlaAppendArgs a;
  a.rows = rows;
  a.start_pos = start;
  a.cache = c.cache();
  mla_append(a);
  std::vector<double> want = before;
  const std::vector<double> r = rows.values();
  for (std::int64_t b = 0; b < 2; ++b) {
    const std::int64_t pos0 = b == 0 ? 2 : 17;
    for (std::int64_t t = 0; t < 3; ++t) {
      const std::int64_t pos = pos0 + t;
      const std::int64_t page = c.page_ids[std::size_t(b)][std::size_t(pos / s.page_size)];
      for (std::int64_t e = 0; e < s.width(); ++e) {
        want[std::size_t((page * s.page_size + pos % s.page_size) * s.width() + e)] =
            r[std::size_t((b * 3 + t) * s.width() + e)];
      }
    }
  }
  const std::vector<double> after = c.pages.values();
  for (std::size_t i = 0; i < after.size(); ++i) {
    ASSERT_TRUE(after[i] == want[i] || (std::isnan(after[i]) && std::isnan(want[i])))
        << "page element " << i;
  }
}

// --- errors: each names the MLA argument --------------------------------------------------------

class MlaValidation : public ::testing::Test {
 protected:
  MlaValidation() : c(make_mla_case(small())), out(DType::f32, c.out_shape()) { out.poison(); }
  static MlaShape small() {
    MlaShape s;
    s.heads = 2;
    s.latent = 8;
    s.rope = 4;
    s.nope = 4;
    s.dv = 4;
    s.page_size = 4;
    s.seq_lens = {3, 6};
    s.q_lens = {1, 1};
    return s;
  }
  MlaDecodeArgs args() const { return c.args(out, Tensor(), Algo::automatic, 0); }
  void fails(const MlaDecodeArgs& a, const std::string& argument,
             const std::string& fragment = "") {
    expect_error([&] { mla_decode(a); }, argument, fragment);
    for (double x : out.values()) ASSERT_TRUE(std::isnan(x)) << "out written by a failed call";
  }
  MlaCase c;
  HostTensor out;
};

TEST_F(MlaValidation, ValidCallRuns) {
  mla_decode(args());
  for (double x : out.values()) ASSERT_FALSE(std::isnan(x));
}

TEST_F(MlaValidation, Widths) {
  HostTensor narrow_q(DType::f32, {2, 1, 2, 11});
  auto a = args();
  a.q = narrow_q;
  fails(a, "q.shape[3]", "latent_dim + rope_dim");
  a = args();
  a.latent_dim = 0;
  fails(a, "latent_dim", "1..12");
  a.latent_dim = 13;
  fails(a, "latent_dim", "1..12");
  HostTensor wide_out(DType::f32, {2, 1, 2, 12});
  a = args();
  a.out = wide_out;
  fails(a, "out.shape[3]", "latent_dim");
  HostTensor flat(DType::f32, {c.num_pages, 4 * 12});
  a = args();
  a.cache.pages = flat;
  fails(a, "cache.pages", "rank 3");
}

TEST_F(MlaValidation, ScaleIsRequired) {
  auto a = args();
  a.softmax_scale.reset();
  fails(a, "softmax_scale", "qk_nope_dim + rope_dim");
}

TEST_F(MlaValidation, CacheErrorsUseTheCacheNames) {
  auto a = args();
  std::vector<double> table = c.block_table.values();
  table[std::size_t(c.max_pages) + 1] = double(c.num_pages + 3);  // sequence 1's tokens 4..5
  HostTensor bad_table(DType::i32, {2, c.max_pages});
  bad_table.set_values(table);
  a.cache.block_table = bad_table;
  fails(a, "cache.block_table[1, 1]", "out of range");
  HostTensor long_lens(DType::i32, {2});
  long_lens.set_values({3.0, 1000.0});
  a = args();
  a.cache.seq_lens = long_lens;
  fails(a, "cache.seq_lens[1]", "longer than its pages");
  HostTensor odd_pages(DType::f32, {c.num_pages, 3, 12});
  a = args();
  a.cache.pages = odd_pages;
  fails(a, "cache.pages.shape[1]", "power of two");
  HostTensor f16_pages(DType::f16, {c.num_pages, 4, 12});
  a = args();
  a.cache.pages = f16_pages;
  fails(a, "cache.pages.dtype", "e4m3");
}

TEST_F(MlaValidation, E4m3PagesNeedOneScalePerPage) {
  HostTensor fp8(DType::e4m3, {c.num_pages, 4, 12}), short_scale(DType::f32, {c.num_pages - 1});
  auto a = args();
  a.cache.pages = fp8;
  fails(a, "cache.scale", "a tensor");
  a.cache.scale = short_scale;
  fails(a, "cache.scale.shape[0]", "num_pages");
  HostTensor scale_2d(DType::f32, {c.num_pages, 1});
  a.cache.scale = scale_2d;
  fails(a, "cache.scale", "rank 1");
}

TEST_F(MlaValidation, CudaTensorsAreRefusedByName) {
  auto a = args();
  const Tensor& q = a.q;
  const Device gpu = Device::cuda(0);
  a.q = Tensor(q.data(), q.dtype(), {q.size(0), q.size(1), q.size(2), q.size(3)},
               {q.stride(0), q.stride(1), q.stride(2), q.stride(3)}, gpu);
  const Tensor& p = c.pages.view();
  a.cache.pages = Tensor(p.data(), p.dtype(), {p.size(0), p.size(1), p.size(2)}, gpu);
  const Tensor& o = out.view();
  a.out = Tensor(o.data(), o.dtype(), {o.size(0), o.size(1), o.size(2), o.size(3)}, gpu);
  fails(a, "q.device", "its GPU path is not written yet");
}

TEST_F(MlaValidation, AppendErrors) {
  HostTensor rows(DType::f32, {2, 1, 11}), start(DType::i32, {2});
  start.set_values({3.0, 6.0});
  MlaAppendArgs a;
  a.rows = rows;
  a.start_pos = start;
  a.cache = c.cache();
  expect_error([&] { mla_append(a); }, "rows.shape[2]", "width of a cache row");
  HostTensor f16_rows(DType::f16, {2, 1, 12});
  a.rows = f16_rows;
  expect_error([&] { mla_append(a); }, "cache.pages.dtype", "f16");
  HostTensor good_rows(DType::f32, {2, 1, 12}), past(DType::i32, {2});
  past.set_values({3.0, double(c.max_pages * 4)});
  a.rows = good_rows;
  a.start_pos = past;
  expect_error([&] { mla_append(a); }, "start_pos[1]", "within max_pages * page_size");
  HostTensor fp8(DType::e4m3, {c.num_pages, 4, 12}), zero_scales(DType::f32, {c.num_pages});
  zero_scales.set_values(std::vector<double>(std::size_t(c.num_pages), 0.0));
  a.start_pos = start;
  a.cache.pages = fp8;
  a.cache.scale = zero_scales;
  const std::string page = std::to_string(c.page_ids[0][0]);  // token 3 of sequence 0
  expect_error([&] { mla_append(a); }, "cache.scale[" + page + "]", "finite scale > 0");
}

}  // namespace
}  // namespace flashkit::testing
