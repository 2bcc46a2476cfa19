#include <gtest/gtest.h>

#include <cstdint>

#include "core/numeric.hpp"
#include "flashkit/flashkit.hpp"

namespace flashkit {
namespace {

TEST(Tensor, ContiguousStrides) {
  float x = 0;
  Tensor t(&x, DType::f32, {2, 3, 4, 5});
  EXPECT_EQ(t.rank(), 4);
  EXPECT_EQ(t.stride(0), 60);
  EXPECT_EQ(t.stride(2), 5);
  EXPECT_EQ(t.numel(), 120);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.shape_str(), "[2, 3, 4, 5]");
}

TEST(Tensor, StridedViewIsNotContiguous) {
  float x = 0;
  Tensor t(&x, DType::f32, {2, 3}, {8, 1});
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_TRUE(t.defined());
  EXPECT_FALSE(Tensor().defined());
}

TEST(Tensor, BadRankOrSizeThrows) {
  const std::int64_t shape[5] = {1, 1, 1, 1, 1};
  EXPECT_THROW(Tensor::from_arrays(nullptr, DType::f32, 5, shape, shape, Device::cpu()), Error);
  const std::int64_t negative[1] = {-3};
  EXPECT_THROW(Tensor::from_arrays(nullptr, DType::f32, 1, negative, shape, Device::cpu()), Error);
  EXPECT_THROW(Tensor(nullptr, DType::f32, {2, 2}, {1}), Error);
}

TEST(Tensor, DtypeTable) {
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::e4m3), 1u);
  EXPECT_EQ(dtype_size(DType::f64), 8u);
  EXPECT_STREQ(dtype_name(DType::e5m2), "e5m2");
  EXPECT_FALSE(is_floating(DType::i32));
  EXPECT_EQ(Device::cuda(3).str(), "cuda:3");
}

TEST(Numeric, HalfAndBfloatRoundTrip) {
  using namespace core;
  EXPECT_EQ(f16_to_float(float_to_f16(1.0f)), 1.0f);
  EXPECT_EQ(f16_to_float(float_to_f16(-2.5f)), -2.5f);
  EXPECT_EQ(f16_to_float(float_to_f16(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(f16_to_float(float_to_f16(70000.0f))));
  EXPECT_EQ(f16_to_float(float_to_f16(5.960464477539063e-08f)), 5.960464477539063e-08f);
  // 1 + 2^-11 is halfway between two f16 values: ties to even gives 1.
  EXPECT_EQ(f16_to_float(float_to_f16(1.0f + 0.00048828125f)), 1.0f);
  EXPECT_EQ(bf16_to_float(float_to_bf16(3.0f)), 3.0f);
  // 1 + 2^-8 is halfway in bf16: ties to even gives 1; a bit more rounds up.
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.00390625f)), 1.0f);
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0040f)), 1.0078125f);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
}

TEST(Numeric, Fp8Decode) {
  using namespace core;
  EXPECT_EQ(e4m3_to_float(0x7e), 448.0f);  // largest finite e4m3
  EXPECT_TRUE(std::isnan(e4m3_to_float(0x7f)));
  EXPECT_EQ(e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_float(0x01), 0.001953125f);  // smallest subnormal 2^-9
  EXPECT_EQ(e5m2_to_float(0x3c), 1.0f);
  EXPECT_EQ(e5m2_to_float(0x7b), 57344.0f);  // largest finite e5m2
}

TEST(Info, BuildAndDevices) {
  EXPECT_STRNE(version(), "");
  EXPECT_FALSE(build_info().cpu_isa.empty());
  const auto devs = devices();
  ASSERT_FALSE(devs.empty());
  EXPECT_EQ(devs.front().backend, "cpu");
}

// Before any CUDA call needed scratch (always, in a process that ran none) nothing is reserved,
// and releasing is a no-op; a CUDA build keeps up to 1 GiB per device (tests/gpu/test_scratch_pool
// checks the pool itself).
TEST(Info, ScratchMemoryBeforeAnyCall) {
  EXPECT_EQ(scratch_memory().reserved_bytes, 0u);
  release_scratch_memory();
  EXPECT_EQ(scratch_memory().reserved_bytes, 0u);
  EXPECT_EQ(scratch_memory().keep_bytes, build_info().cuda ? std::uint64_t(1) << 30 : 0u);
}

}  // namespace
}  // namespace flashkit
