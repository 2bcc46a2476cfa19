// FastDiv (cuda/common/fast_div.hpp) against the / operator on the host: every divisor up to
// 4096 over dividends around its multiples and at random, and divisors up to 2^31 - 1.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>

#include "cuda/common/fast_div.hpp"

namespace flashkit::testing {
namespace {

using cuda::FastDiv;
using cuda::make_fast_div;

void check(int d, int n) {
  const FastDiv f = make_fast_div(d);
  ASSERT_EQ(f.div(n), n / d) << "n " << n << " d " << d;
}

TEST(FastDiv, SmallDivisorsAroundTheirMultiplesAndAtRandom) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> any(0, std::numeric_limits<int>::max());
  for (int d = 1; d <= 4096; ++d) {
    for (int q : {0, 1, 2, 3, 1000, (std::numeric_limits<int>::max() / d) - 1}) {
      for (int r : {-1, 0, 1, d - 1}) {
        const std::int64_t n = std::int64_t(q) * d + r;
        if (n >= 0 && n <= std::numeric_limits<int>::max()) check(d, int(n));
      }
    }
    for (int i = 0; i < 64; ++i) check(d, any(rng));
    check(d, std::numeric_limits<int>::max());
  }
}

TEST(FastDiv, LargeDivisors) {
  std::mt19937 rng(4);
  std::uniform_int_distribution<int> any(0, std::numeric_limits<int>::max());
  for (int i = 0; i < 20000; ++i) {
    const int d = std::max(1, any(rng) >> (i % 31));
    check(d, any(rng));
    check(d, d - 1);
    check(d, d);
    check(d, std::numeric_limits<int>::max());
  }
  for (int l = 0; l < 31; ++l) {  // powers of two and their neighbours
    for (int d : {(1 << l) - 1, 1 << l, (1 << l) + 1}) {
      if (d >= 1) check(d, std::numeric_limits<int>::max() - l);
    }
  }
}

}  // namespace
}  // namespace flashkit::testing
