// Host checks of the Hopper shared-memory layout helpers (ptx/smem_desc.hpp) and of the tensor-map
// argument checks (common/tensor_map.cpp), which run before any driver call: no GPU needed.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <vector>

#include "cuda/common/tensor_map.hpp"
#include "cuda/ptx/smem_desc.hpp"
#include "expect_error.hpp"

namespace flashkit::testing {
namespace {

using cuda::ptx::smem_desc;
using cuda::ptx::smem_desc_advance;
using cuda::ptx::Swizzle;
using cuda::ptx::swizzled_offset;

TEST(SmemDesc, PacksFieldsWhereThePtxManualPutsThem) {
  // start 0x1230 -> 0x123 in bits 0..13; LBO 4096 -> 256 in 16..29; SBO 1024 -> 64 in 32..45;
  // 128-byte swizzle = 1 in bits 62..63.
  const std::uint64_t d = smem_desc(0x1230, 4096, 1024, Swizzle::b128);
  EXPECT_EQ(d & 0x3FFF, 0x123u);
  EXPECT_EQ((d >> 16) & 0x3FFF, 256u);
  EXPECT_EQ((d >> 32) & 0x3FFF, 64u);
  EXPECT_EQ((d >> 49) & 0x7, 0u);
  EXPECT_EQ(d >> 62, 1u);
  EXPECT_EQ(smem_desc(0, 0, 0, Swizzle::b32) >> 62, 3u);
  // Addresses are taken modulo 256 KB (18 bits) before the >> 4, as the manual's encode does.
  EXPECT_EQ(smem_desc(0x40010, 0, 0, Swizzle::none) & 0x3FFF, 1u);
}

// Advancing a descriptor by an add equals building it at the later address, for 16-byte aligned
// starts and offsets spread over the 228 KB shared memory can hold, in every mode.
TEST(SmemDesc, AdvanceEqualsTheDescriptorOfTheLaterAddress) {
  constexpr std::uint32_t kSmem = 228 * 1024;
  for (Swizzle sw : {Swizzle::none, Swizzle::b128, Swizzle::b64, Swizzle::b32}) {
    for (std::uint32_t start = 0; start < kSmem; start += 1024 * 7 + 16) {
      for (std::uint32_t bytes = 0; start + bytes < kSmem; bytes += 1024 * 5 + 32) {
        EXPECT_EQ(smem_desc_advance(smem_desc(start, 2048, 1024, sw), bytes),
                  smem_desc(start + bytes, 2048, 1024, sw))
            << "start " << start << ", bytes " << bytes;
      }
    }
  }
}

class SwizzlePattern : public ::testing::TestWithParam<Swizzle> {};

TEST_P(SwizzlePattern, PermutesUnitsInsideEachAtomAndKeepsBytesInTheirUnit) {
  const Swizzle s = GetParam();
  const std::uint32_t span = cuda::ptx::swizzle_span_bytes(s), atom = 8 * span;
  std::set<std::uint32_t> seen;
  for (std::uint32_t linear = 0; linear < 4 * atom; ++linear) {
    const std::uint32_t p = swizzled_offset(linear, s);
    EXPECT_EQ(p / atom, linear / atom) << "left its atom: " << linear;
    EXPECT_EQ(p % 16, linear % 16) << "moved inside a 16-byte unit: " << linear;
    EXPECT_EQ(p / 128, linear / 128) << "left its 128-byte line: " << linear;
    seen.insert(p);
  }
  EXPECT_EQ(seen.size(), 4 * atom) << "not a permutation";
}

TEST_P(SwizzlePattern, RowsOfOneAtomHitDistinctBanksAtTheSameColumn) {
  // What the swizzle is for: the 8 rows of an atom, read at the same 16-byte column, land in 8
  // different 16-byte bank groups when 8 rows span 8 * 128 bytes (128-byte span); narrower spans
  // pack 2 or 4 rows per line, so 8 rows cover all 8 groups of the lines they share.
  const Swizzle s = GetParam();
  const std::uint32_t span = cuda::ptx::swizzle_span_bytes(s);
  for (std::uint32_t col = 0; col < span; col += 16) {
    std::set<std::uint32_t> groups;
    for (std::uint32_t row = 0; row < 8; ++row) {
      groups.insert((swizzled_offset(row * span + col, s) % 128) / 16);
    }
    EXPECT_EQ(groups.size(), 8u) << "column " << col;
  }
}

INSTANTIATE_TEST_SUITE_P(All, SwizzlePattern,
                         ::testing::Values(Swizzle::b128, Swizzle::b64, Swizzle::b32));

cuda::TensorMapSpec good_spec(const void* base) {
  cuda::TensorMapSpec spec;
  spec.base = base;
  spec.dtype = DType::bf16;
  spec.dims = {128, 64};
  spec.strides_bytes = {256};
  spec.box = {64, 64};
  spec.swizzle = Swizzle::b128;
  return spec;
}

alignas(16) const unsigned char kBuffer[64] = {};

TEST(TensorMapSpec, BadArgumentsAreNamedBeforeTheDriverIsAsked) {
  auto spec = good_spec(kBuffer + 8);
  expect_error([&] { cuda::make_tensor_map(spec); }, "tensor map base");
  spec = good_spec(kBuffer);
  spec.dims = {128, 64, 1, 1, 1, 1};
  expect_error([&] { cuda::make_tensor_map(spec); }, "tensor map dims");
  spec = good_spec(kBuffer);
  spec.box = {64};
  expect_error([&] { cuda::make_tensor_map(spec); }, "tensor map box/strides");
  spec = good_spec(kBuffer);
  spec.box = {64, 512};
  expect_error([&] { cuda::make_tensor_map(spec); }, "tensor map box[1]");
  spec = good_spec(kBuffer);
  spec.strides_bytes = {200};
  expect_error([&] { cuda::make_tensor_map(spec); }, "tensor map strides_bytes[0]");
  spec = good_spec(kBuffer);
  spec.box = {128, 64};  // 256 bytes per row: wider than the 128-byte swizzle span
  expect_error([&] { cuda::make_tensor_map(spec); }, "tensor map box[0]");
  spec = good_spec(kBuffer);
  spec.box = {4, 64};  // 8 bytes: TMA moves whole 16-byte units
  expect_error([&] { cuda::make_tensor_map(spec); }, "tensor map box[0]");
}

}  // namespace
}  // namespace flashkit::testing
