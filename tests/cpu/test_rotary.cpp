// apply_rotary on the CPU against the definition computed in double (rotary_case.hpp): both pair
// layouts, the three ways of giving positions, packed sequences, partial rotary dims, in place,
// the conjugate as the inverse, tables in f32 or x's dtype; outputs poisoned. Then each bad
// argument is an Error naming it.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "expect_error.hpp"
#include "flashkit/info.hpp"
#include "flashkit/rotary.hpp"
#include "host_tensor.hpp"
#include "rotary_case.hpp"

namespace flashkit::testing {
namespace {

void check_case(const RotarySpec& spec) {
  SCOPED_TRACE(spec.name());
  const RotaryCase c = make_rotary_case(spec);
  HostTensor out(spec.dtype, c.shape());
  out.poison();
  const std::vector<double> before = out.values();
  apply_rotary(c.args(out));
  EXPECT_LE(rounding_units(out.values(), c.expected(before), spec.dtype), 1.0);
}

TEST(Rotary, HalvesAndInterleavedPairs) {
  for (bool interleaved : {false, true}) {
    RotarySpec s;
    s.interleaved = interleaved;
    check_case(s);
  }
}

TEST(Rotary, PositionsFromOffsetsIdsOrOnePerSequence) {
  for (auto kind : {RotaryPositionKind::offsets, RotaryPositionKind::ids,
                    RotaryPositionKind::one_per_sequence}) {
    RotarySpec s;
    s.positions = kind;
    s.seed = 2 + std::uint32_t(kind);
    check_case(s);
  }
}

TEST(Rotary, PackedSequencesLeaveRowsPastTheLastOneUnwritten) {
  for (auto kind :
       {RotaryPositionKind::index, RotaryPositionKind::offsets, RotaryPositionKind::ids}) {
    RotarySpec s;
    s.packed = true;
    s.positions = kind;
    s.interleaved = kind == RotaryPositionKind::ids;
    check_case(s);
  }
}

TEST(Rotary, PartialRotaryDimCopiesTheRest) {
  RotarySpec s;
  s.head_dim = 24;
  s.rotary_dim = 10;
  s.positions = RotaryPositionKind::offsets;
  check_case(s);
  s.interleaved = true;
  check_case(s);
}

TEST(Rotary, HalfPrecisionWithTablesOfEitherDtype) {
  for (DType dtype : {DType::bf16, DType::f16}) {
    for (DType table : {DType::f32, dtype}) {
      RotarySpec s;
      s.dtype = dtype;
      s.table_dtype = table;
      s.head_dim = 64;
      s.rotary_dim = 64;
      s.positions = RotaryPositionKind::offsets;
      check_case(s);
    }
  }
}

TEST(Rotary, InPlaceAndTheConjugateUndoesIt) {
  RotarySpec s;
  s.positions = RotaryPositionKind::ids;
  const RotaryCase c = make_rotary_case(s);
  const std::vector<double> x = c.x.values();
  HostTensor expect_out(s.dtype, c.shape());
  const std::vector<double> want = c.expected(expect_out.values());
  RotaryArgs a = c.args(c.x);  // out = x
  apply_rotary(a);
  EXPECT_LE(rounding_units(c.x.values(), want, s.dtype), 1.0);
  a.conjugate = true;
  apply_rotary(a);
  // Two roundings of O(1) values in f32.
  const std::vector<double> back = c.x.values();
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(back[i], x[i], 1e-6) << i;
}

// --- errors ----------------------------------------------------------------------------------

class RotaryValidation : public ::testing::Test {
 protected:
  RotaryValidation() : c(make_rotary_case(spec())), out(DType::f32, c.shape()) { out.poison(); }
  static RotarySpec spec() {
    RotarySpec s;
    s.positions = RotaryPositionKind::offsets;
    return s;
  }
  void fails(const RotaryArgs& a, const std::string& argument, const std::string& fragment = "") {
    expect_error([&] { apply_rotary(a); }, argument, fragment);
    for (double v : out.values()) ASSERT_TRUE(std::isnan(v)) << "out written by a failed call";
  }
  static HostTensor ints(std::vector<std::int64_t> shape, const std::vector<double>& values) {
    HostTensor t(DType::i32, std::move(shape));
    t.set_values(values);
    return t;
  }
  RotaryCase c;
  HostTensor out;
};

TEST_F(RotaryValidation, ValidCallRuns) {
  apply_rotary(c.args(out));
  for (double v : out.values()) ASSERT_FALSE(std::isnan(v));
}

TEST_F(RotaryValidation, Shapes) {
  HostTensor wrong_out(DType::f32, {3, 5, 2, 8});
  auto a = c.args(out);
  a.out = wrong_out;
  fails(a, "out.shape[3]", "as x");
  HostTensor flat(DType::f32, {3, 5, 32});
  a = c.args(out);
  a.x = flat;
  fails(a, "x", "rank 4");
  HostTensor wide_cos(DType::f32, {40, 9}), short_sin(DType::f32, {39, 8});
  a = c.args(out);
  a.cos = wide_cos;
  fails(a, "sin.shape[1]", "as cos");
  a.sin = wide_cos;
  fails(a, "cos.shape[1]", "rotary_dim <= the head dim of x");
  a = c.args(out);
  a.sin = short_sin;
  fails(a, "sin.shape[0]", "as cos");
}

TEST_F(RotaryValidation, Dtypes) {
  HostTensor f16_cos(DType::f16, {40, 8}), f64_x(DType::f64, c.shape());
  auto a = c.args(out);
  a.cos = f16_cos;
  fails(a, "cos.dtype", "f32 or f32");
  a = c.args(out);
  a.x = f64_x;
  fails(a, "x.dtype", "f32, f16, bf16");
  HostTensor float_offsets(DType::f32, {3});
  a = c.args(out);
  a.seqlen_offsets = float_offsets;
  fails(a, "seqlen_offsets.dtype", "i32");
}

TEST_F(RotaryValidation, PositionsWithinTheTables) {
  auto a = c.args(out);
  HostTensor past = ints({3}, {0, 36, 1});  // 36 + 4 = 40: one row past the 40 of cos / sin
  a.seqlen_offsets = past;
  fails(a, "seqlen_offsets[1] + 4", "[0, 40)");
  HostTensor negative = ints({3}, {0, -1, 1});
  a.seqlen_offsets = negative;
  fails(a, "seqlen_offsets[1]", "[0, 40)");
  HostTensor ids = ints({3, 5}, std::vector<double>(15, 3.0));
  a = c.args(out);
  a.seqlen_offsets = Tensor();
  a.position_ids = ids;
  EXPECT_NO_THROW(apply_rotary(a));
  out.poison();
  HostTensor bad_ids = ints({3, 5}, {0, 0, 0, 0, 0, 0, 0, 40, 0, 0, 0, 0, 0, 0, 0});
  a.position_ids = bad_ids;
  fails(a, "position_ids[1, 2]", "[0, 40)");
  a.seqlen_offsets = c.seqlen_offsets;
  fails(a, "position_ids", "one of the two");
  HostTensor short_cos(DType::f32, {4, 8});
  a = c.args(out);
  a.seqlen_offsets = Tensor();
  a.cos = a.sin = short_cos;
  fails(a, "cos.shape[0]", ">= 5");
}

TEST_F(RotaryValidation, PackedOffsets) {
  RotarySpec s;
  s.packed = true;
  const RotaryCase p = make_rotary_case(s);
  HostTensor packed_out(DType::f32, p.shape());
  auto a = p.args(packed_out);
  HostTensor decreasing = ints({4}, {0, 2, 1, 7});
  a.cu_seqlens = decreasing;
  expect_error([&] { apply_rotary(a); }, "cu_seqlens[2]", "non-decreasing");
  HostTensor too_far = ints({4}, {0, 2, 2, 10});
  a.cu_seqlens = too_far;
  expect_error([&] { apply_rotary(a); }, "cu_seqlens[3]", "packed tokens of x");
}

TEST_F(RotaryValidation, OutSharingXMustBeX) {
  auto a = c.args(out);
  const Tensor& x = c.x.view();
  a.out = Tensor(x.data(), DType::f32, {3, 5, 2, 16}, {80, 16, 8, 1});  // heads interleaved
  expect_error([&] { apply_rotary(a); }, "out", "x itself");
}

TEST_F(RotaryValidation, DeviceWithoutBackend) {
  if (build_info().cuda) {
    SUCCEED() << "CUDA build: covered by the GPU suite";
    return;
  }
  auto a = c.args(out);
  const Tensor& x = c.x.view();
  const Device gpu = Device::cuda(0);
  a.x = Tensor(x.data(), DType::f32, {3, 5, 2, 16}, gpu);
  a.out = Tensor(out.view().data(), DType::f32, {3, 5, 2, 16}, gpu);
  a.cos = Tensor(c.cos.view().data(), DType::f32, {40, 8}, gpu);
  a.sin = Tensor(c.sin.view().data(), DType::f32, {40, 8}, gpu);
  a.seqlen_offsets = Tensor(c.seqlen_offsets.view().data(), DType::i32, {3}, gpu);
  fails(a, "x.device", "no CUDA backend");
}

}  // namespace
}  // namespace flashkit::testing
