// append_kv on CUDA, byte for byte: the new rows land in exactly their slots (page ids shuffled,
// the pool NaN everywhere else, appends crossing page boundaries); f32 / f16 / bf16 pages hold
// the values, e4m3 pages hold core::float_to_e4m3(value / scale), the CPU encoder: this is where
// the sm90 hardware conversion (cvt.rn.satfinite.e4m3x2.f32) is held to it, ties, subnormals
// and saturation included.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/numeric.hpp"
#include "device_tensor.hpp"
#include "flashkit/flashkit.hpp"

namespace flashkit::testing {
namespace {

struct AppendSpec {
  DType page_dtype = DType::bf16;
  DType src_dtype = DType::bf16;  // = page_dtype unless e4m3
  std::int64_t page_size = 16;
  bool padded_src = false;
  // Values for the head of k_new, before the random rest (exact in src_dtype); e4m3 pages then
  // get scale 1 for these rows so that the values reach the encoder unchanged.
  std::vector<double> crafted;
  std::uint32_t seed = 1;
};

constexpr std::int64_t kBatch = 3, kNew = 5, kHeads = 2, kDim = 64;
const std::int32_t kStart[kBatch] = {0, 13, 30};  // 13 + 5 crosses a page of 16

std::string first_difference(const HostTensor& got, const HostTensor& want) {
  const auto* g = got.view().data_as<const std::uint8_t>();
  const auto* w = want.view().data_as<const std::uint8_t>();
  const std::size_t bytes = std::size_t(want.numel()) * dtype_size(want.dtype());
  for (std::size_t i = 0; i < bytes; ++i) {
    if (g[i] != w[i]) {
      std::ostringstream s;
      s << "byte " << i << " (element " << i / dtype_size(want.dtype()) << "): got 0x" << std::hex
        << int(g[i]) << ", want 0x" << int(w[i]);
      return s.str();
    }
  }
  return "";
}

void check_append(const AppendSpec& spec) {
  SCOPED_TRACE(std::string("pages ") + dtype_name(spec.page_dtype) + " from " +
               dtype_name(spec.src_dtype) + ", page size " + std::to_string(spec.page_size) +
               (spec.padded_src ? ", padded source" : ""));
  std::mt19937 rng(spec.seed);
  const std::int64_t ps = spec.page_size;
  const std::int64_t max_pages = (kStart[kBatch - 1] + kNew + ps - 1) / ps + 1;
  const std::int64_t num_pages = kBatch * max_pages + 1;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(num_pages));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);

  HostTensor table(DType::i32, {kBatch, max_pages}), start(DType::i32, {kBatch});
  for (std::int64_t i = 0; i < kBatch * max_pages; ++i) {
    table.view().data_as<std::int32_t>()[i] = ids[std::size_t(i)];
  }
  for (std::int64_t b = 0; b < kBatch; ++b) start.view().data_as<std::int32_t>()[b] = kStart[b];

  const std::vector<std::int64_t> pool{num_pages, ps, kHeads, kDim};
  const bool fp8 = spec.page_dtype == DType::e4m3;
  HostTensor k_pages(spec.page_dtype, pool), v_pages(spec.page_dtype, pool);
  for (HostTensor* p : {&k_pages, &v_pages}) {
    std::memset(p->view().data(), 0xFF, std::size_t(p->numel()) * dtype_size(spec.page_dtype));
  }
  HostTensor k_scale, v_scale;
  if (fp8) {
    // Small scales push |value / scale| past 448 often: saturation is exercised too.
    std::uniform_real_distribution<double> scale(0.001, 0.05);
    k_scale = HostTensor(DType::f32, {num_pages, kHeads});
    v_scale = HostTensor(DType::f32, {num_pages, kHeads});
    for (std::int64_t i = 0; i < num_pages * kHeads; ++i) {
      k_scale.view().data_as<float>()[i] = float(scale(rng));
      v_scale.view().data_as<float>()[i] = float(scale(rng));
    }
  }

  const std::vector<std::int64_t> shape{kBatch, kNew, kHeads, kDim};
  std::vector<std::int64_t> alloc = shape;
  if (spec.padded_src) alloc.back() += 8;
  HostTensor k_new(spec.src_dtype, shape, alloc), v_new(spec.src_dtype, shape, alloc);
  k_new.fill_random(rng);
  v_new.fill_random(rng);
  if (!spec.crafted.empty()) {
    std::vector<double> values = k_new.values();
    std::copy(spec.crafted.begin(), spec.crafted.end(), values.begin());
    k_new.set_values(values);
    // The crafted values are the first rows of sequence 0: its first page, head 0.
    if (fp8) k_scale.view().data_as<float>()[std::int64_t(ids[0]) * kHeads] = 1.0f;
  }

  // Device copies of the poisoned pool, then the host pool becomes the expected one.
  const DeviceTensor d_k_pages(k_pages), d_v_pages(v_pages), d_k_scale(k_scale), d_v_scale(v_scale),
      d_table(table), d_start(start), d_k_new(k_new), d_v_new(v_new);
  for (int side = 0; side < 2; ++side) {
    HostTensor& pages = side == 0 ? k_pages : v_pages;
    const HostTensor& src = side == 0 ? k_new : v_new;
    const HostTensor& scales = side == 0 ? k_scale : v_scale;
    const std::vector<double> x = src.values();
    for (std::int64_t i = 0; i < std::int64_t(x.size()); ++i) {
      const std::int64_t e = i % kDim, h = (i / kDim) % kHeads, t = (i / kDim / kHeads) % kNew;
      const std::int64_t b = i / kDim / kHeads / kNew;
      const std::int64_t pos = kStart[b] + t;
      const std::int64_t page = table.view().data_as<std::int32_t>()[b * max_pages + pos / ps];
      const std::int64_t at = ((page * ps + pos % ps) * kHeads + h) * kDim + e;
      if (fp8) {
        const float scale = scales.view().data_as<float>()[page * kHeads + h];
        pages.view().data_as<std::uint8_t>()[at] =
            core::float_to_e4m3(float(x[std::size_t(i)]) / scale);
      } else {
        core::store_from_double(pages.view().data(), spec.page_dtype, at, x[std::size_t(i)]);
      }
    }
  }

  AppendKVArgs a;
  a.k_new = d_k_new.view();
  a.v_new = d_v_new.view();
  a.start_pos = d_start.view();
  a.kv.k_pages = d_k_pages.view();
  a.kv.v_pages = d_v_pages.view();
  a.kv.k_scale = d_k_scale.view();
  a.kv.v_scale = d_v_scale.view();
  a.kv.block_table = d_table.view();
  append_kv(a);
  expect_device_ok();
  HostTensor got_k(spec.page_dtype, pool), got_v(spec.page_dtype, pool);
  d_k_pages.copy_to(got_k);
  d_v_pages.copy_to(got_v);
  EXPECT_EQ("", first_difference(got_k, k_pages)) << "k_pages";
  EXPECT_EQ("", first_difference(got_v, v_pages)) << "v_pages";
}

TEST(AppendKv, CopiesIntoF32F16AndBf16Pages) {
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    for (std::int64_t ps : {1, 16}) {
      for (bool padded : {false, true}) {
        check_append({dt, dt, ps, padded, {}, std::uint32_t(ps + int(dt))});
      }
    }
  }
}

TEST(AppendKv, QuantisesE4m3PagesLikeTheCpuEncoder) {
  for (DType src : {DType::f32, DType::f16, DType::bf16}) {
    for (std::int64_t ps : {1, 16}) {
      check_append({DType::e4m3, src, ps, ps == 16, {}, std::uint32_t(7 + ps + int(src))});
    }
  }
}

TEST(AppendKv, E4m3TiesSubnormalsAndSaturation) {
  // Scale 1: ties between codes round to the even one (1.0625 -> 1, 1.1875 -> 1.25), subnormal
  // ties (1.5 and 2.5 units of 2^-9), the largest values (448; 464 ties with 480, which is not
  // finite, so 448), past the range (500, -1000: saturate), and tiny values that round to zero.
  const std::vector<double> crafted = {
      1.0625, 1.1875,  -1.0625,      0.0029296875,  0.0048828125, -0.0029296875, 448.0, 464.0,
      500.0,  -1000.0, 0.0009765625, -0.0009765625, 0.01953125,   240.0,         -3.25, 0.875};
  check_append({DType::e4m3, DType::f32, 16, false, crafted, 99});
}

}  // namespace
}  // namespace flashkit::testing
