// FP8 e4m3 KV: the float -> e4m3 encoder (round-to-nearest-even, saturating), append_kv into
// bf16 and e4m3 pages (round trip, page boundaries), and the accuracy lost by an e4m3 cache
// against a bf16 one (the numbers docs/kernels/paged_cpu.md quotes).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "core/numeric.hpp"
#include "cpu/paged_math.hpp"
#include "flashkit/paged.hpp"
#include "paged_case.hpp"

namespace flashkit::testing {
namespace {

using core::e4m3_to_float;
using core::float_to_e4m3;

// --- the encoder -----------------------------------------------------------------------------

TEST(E4m3Encode, EveryCodeRoundTrips) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7f) == 0x7f) continue;  // NaN
    EXPECT_EQ(float_to_e4m3(e4m3_to_float(std::uint8_t(code))), code) << "code " << code;
  }
}

TEST(E4m3Encode, MidpointsRoundToEven) {
  for (int code = 0; code < 0x7e; ++code) {
    const float lo = e4m3_to_float(std::uint8_t(code));
    const float hi = e4m3_to_float(std::uint8_t(code + 1));
    const float mid = (lo + hi) / 2;  // exact in fp32
    const int even = code % 2 == 0 ? code : code + 1;
    EXPECT_EQ(float_to_e4m3(mid), even) << "between codes " << code << " and " << code + 1;
    EXPECT_EQ(float_to_e4m3(-mid), even | 0x80);
    EXPECT_EQ(float_to_e4m3(std::nextafter(mid, 0.0f)), code);
    EXPECT_EQ(float_to_e4m3(std::nextafter(mid, 1000.0f)), code + 1);
  }
}

TEST(E4m3Encode, SaturatesAndKeepsNan) {
  const float inf = std::numeric_limits<float>::infinity();
  for (float big : {448.0f, 463.9f, 464.0f, 1e6f, inf}) {
    EXPECT_EQ(float_to_e4m3(big), 0x7e) << big;
    EXPECT_EQ(float_to_e4m3(-big), 0xfe) << big;
  }
  EXPECT_EQ(float_to_e4m3(std::nanf("")) & 0x7f, 0x7f);
  EXPECT_EQ(float_to_e4m3(0.0f), 0x00);
  EXPECT_EQ(float_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0f, -10)), 0x00);  // half the smallest subnormal: even
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0f, -12)), 0x00);
}

TEST(E4m3Decode, FastPathDecoderIsBitExact) {
  for (int code = 0; code < 256; ++code) {
    const float want = e4m3_to_float(std::uint8_t(code));
    const float got = cpu::paged::e4m3_bits_to_float(std::uint8_t(code));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "code " << code;
    } else {
      EXPECT_EQ(core::float_bits(got), core::float_bits(want)) << "code " << code;
    }
  }
}

// --- append_kv -------------------------------------------------------------------------------

// A cache whose sequences already own pages for 9 and 34 tokens; 4 new tokens go to positions
// 5..8 and 30..33 (the second run crosses a page boundary at 32).
struct Appended {
  PagedCase c;
  std::vector<double> start{5, 30};
  std::int64_t n_new = 4;
  HostTensor k_new, v_new, start_pos;
};

Appended make_appended(DType kv_dtype, DType new_dtype) {
  PagedSpec s;
  s.kv_dtype = kv_dtype;
  s.page_size = 16;
  s.heads_q = 4;
  s.heads_kv = 2;
  s.head_dim = 32;
  s.seq_lens = {9, 34};
  s.q_lens = {2, 2};
  Appended a{make_paged_case(s), {5, 30}, 4, {}, {}, {}};
  std::mt19937 rng(7);
  a.k_new = HostTensor(new_dtype, {2, a.n_new, 2, 32});
  a.v_new = HostTensor(new_dtype, {2, a.n_new, 2, 32});
  a.k_new.fill_random(rng);
  a.v_new.fill_random(rng);
  a.start_pos = HostTensor(DType::i32, {2});
  a.start_pos.set_values(a.start);
  return a;
}

void run_append(const Appended& a) {
  AppendKVArgs args;
  args.k_new = a.k_new;
  args.v_new = a.v_new;
  args.start_pos = a.start_pos;
  args.kv = a.c.kv();
  append_kv(args);
}

// Element e of head h of token t of the new rows of sequence b.
double new_at(const HostTensor& t, std::int64_t b, std::int64_t i, std::int64_t h, std::int64_t e) {
  return t.at(((b * 4 + i) * 2 + h) * 32 + e);
}

// The page scale of token `pos` of sequence b, KV head h.
float scale_of(const PagedCase& c, const HostTensor& scales, std::int64_t b, std::int64_t pos,
               std::int64_t h) {
  const std::int32_t page = c.pages[std::size_t(b)][std::size_t(pos / c.spec.page_size)];
  return scales.view().data_as<const float>()[page * 2 + h];
}

TEST(AppendKv, Bf16RowsLandInTheirPagesAndNothingElseMoves) {
  Appended a = make_appended(DType::bf16, DType::bf16);
  std::vector<double> before;
  for (std::int64_t b = 0; b < 2; ++b) {
    for (std::int64_t t = 0; t < a.c.spec.seq_lens[std::size_t(b)]; ++t) {
      before.push_back(a.c.k_at(b, t, 1, 3));
    }
  }
  run_append(a);
  std::size_t i = 0;
  for (std::int64_t b = 0; b < 2; ++b) {
    const std::int64_t start = std::int64_t(a.start[std::size_t(b)]);
    for (std::int64_t t = 0; t < a.c.spec.seq_lens[std::size_t(b)]; ++t, ++i) {
      if (t < start || t >= start + a.n_new) {
        EXPECT_EQ(a.c.k_at(b, t, 1, 3), before[i]) << "token " << t << " of sequence " << b;
        continue;
      }
      for (std::int64_t h = 0; h < 2; ++h) {
        for (std::int64_t e = 0; e < 32; ++e) {
          ASSERT_EQ(a.c.k_at(b, t, h, e), new_at(a.k_new, b, t - start, h, e));
          ASSERT_EQ(a.c.v_at(b, t, h, e), new_at(a.v_new, b, t - start, h, e));
        }
      }
    }
  }
  // Attention then sees the appended tokens (the oracle gathers the pages as they are now).
  const PagedResult fast = run_paged(a.c, Algo::automatic, 1, DType::f32);
  EXPECT_LE(max_abs_diff(fast.out, contiguous_oracle(a.c).out), 2e-6);
}

TEST(AppendKv, E4m3QuantisesWithThePageScale) {
  Appended a = make_appended(DType::e4m3, DType::f32);
  // One value far beyond its page's range must saturate to 448 * scale, not become NaN.
  const float big_scale = scale_of(a.c, a.c.k_scale, 1, 31, 0);
  a.k_new.view().data_as<float>()[((1 * 4 + 1) * 2 + 0) * 32 + 5] = 1000.0f * big_scale;
  run_append(a);
  for (std::int64_t b = 0; b < 2; ++b) {
    const std::int64_t start = std::int64_t(a.start[std::size_t(b)]);
    for (std::int64_t i = 0; i < a.n_new; ++i) {
      for (std::int64_t h = 0; h < 2; ++h) {
        const float ks = scale_of(a.c, a.c.k_scale, b, start + i, h);
        const float vs = scale_of(a.c, a.c.v_scale, b, start + i, h);
        for (std::int64_t e = 0; e < 32; ++e) {
          const float k = float(new_at(a.k_new, b, i, h, e));
          const float v = float(new_at(a.v_new, b, i, h, e));
          // Exactly the encoder's code for value / scale, dequantised with the same scale.
          ASSERT_EQ(a.c.k_at(b, start + i, h, e),
                    double(e4m3_to_float(float_to_e4m3(k / ks))) * ks);
          ASSERT_EQ(a.c.v_at(b, start + i, h, e),
                    double(e4m3_to_float(float_to_e4m3(v / vs))) * vs);
        }
      }
    }
  }
  EXPECT_EQ(a.c.k_at(1, 31, 0, 5), 448.0 * big_scale);
  const PagedResult fast = run_paged(a.c, Algo::automatic, 2, DType::f32);
  EXPECT_LE(max_abs_diff(fast.out, contiguous_oracle(a.c).out), 2e-6);
}

TEST(AppendKv, NothingNewIsANoOp) {
  Appended a = make_appended(DType::bf16, DType::bf16);
  const double before = a.c.k_at(1, 30, 0, 0);
  AppendKVArgs args;
  HostTensor none(DType::bf16, {2, 0, 2, 32});
  args.k_new = none;
  args.v_new = none;
  args.start_pos = a.start_pos;
  args.kv = a.c.kv();
  append_kv(args);
  EXPECT_EQ(a.c.k_at(1, 30, 0, 0), before);
}

// --- accuracy of an e4m3 cache -----------------------------------------------------------------

// The oracle on the same underlying K/V (uniform [-1, 1), per page and head amax scaling) stored
// as f32, bf16 and e4m3: how far bf16 and e4m3 move the output from the f32 cache's.
struct Loss {
  double max_abs, rel_rms;
};

Loss loss(const std::vector<double>& got, const std::vector<double>& want) {
  double worst = 0, err2 = 0, ref2 = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, std::fabs(got[i] - want[i]));
    err2 += (got[i] - want[i]) * (got[i] - want[i]);
    ref2 += want[i] * want[i];
  }
  return {worst, std::sqrt(err2 / ref2)};
}

TEST(E4m3Accuracy, AgainstBf16Cache) {
  for (std::optional<float> scale : {std::optional<float>(), std::optional<float>(0.5f)}) {
    PagedSpec s;
    s.page_size = 16;
    s.heads_q = 8;
    s.heads_kv = 2;
    s.head_dim = 128;
    s.seq_lens = {1000, 3000};
    s.q_lens = {1, 1};
    s.softmax_scale = scale;
    s.kv_dtype = DType::bf16;
    const PagedCase bf16_case = make_paged_case(s);
    // f32 pages need f32 queries: the same (bf16-rounded) query values, held in f32.
    s.kv_dtype = s.q_dtype = DType::f32;
    PagedCase exact_case = make_paged_case(s);
    exact_case.q.set_values(bf16_case.q.values());
    const PagedResult exact = run_paged(exact_case, Algo::reference, 1, DType::f64);
    const Loss bf16 = loss(run_paged(bf16_case, Algo::reference, 1, DType::f64).out, exact.out);
    s.kv_dtype = DType::e4m3;
    s.q_dtype = DType::bf16;
    const PagedCase fp8_case = make_paged_case(s);
    const Loss fp8 = loss(run_paged(fp8_case, Algo::reference, 1, DType::f64).out, exact.out);
    const Loss fp8_fast = loss(run_paged(fp8_case, Algo::automatic, 0, DType::f32).out, exact.out);
    std::cout << "softmax scale " << (scale ? *scale : 1 / std::sqrt(128.0))
              << ": output error vs an f32 cache, max abs / relative rms: bf16 " << bf16.max_abs
              << " / " << bf16.rel_rms << ", e4m3 " << fp8.max_abs << " / " << fp8.rel_rms
              << " (fast path " << fp8_fast.max_abs << " / " << fp8_fast.rel_rms << ")\n";
    EXPECT_LT(bf16.rel_rms, fp8.rel_rms);
    EXPECT_LT(fp8.rel_rms, 0.08);
    EXPECT_LT(fp8_fast.rel_rms, fp8.rel_rms * 1.01 + 1e-6);
  }
}

}  // namespace
}  // namespace flashkit::testing
