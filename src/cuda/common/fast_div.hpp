// Division by a divisor fixed for a whole launch as a multiply-high, an add and a shift
// (Granlund and Montgomery's round-up method, for dividends below 2^31): set up on the host,
// read by the kernel from its parameters. A 32-bit division by a run-time value compiles to ~20
// dependent instructions (I2F, MUFU.RCP, F2I and corrections); the sm90 forward's persistent
// walk divided three times to derive a tile, which its consumers do twice a tile (d = 64 N 512:
// ~530 cycles each time, ~180 by these; docs/kernels/sm90_fwd.md, v36).
#pragma once

#include <cstdint>

#include "core/host_device.hpp"

namespace flashkit::cuda {

struct FastDiv {
  std::int32_t d = 1;   // the divisor
  std::uint32_t m = 0;  // 2^32 (2^l - d) / d + 1, rounded down before the + 1 (0 when d = 2^l)
  std::int32_t l = 0;   // ceil(log2 d)

  // n / d for 0 <= n < 2^31: (n + floor(m n / 2^32)) fits 32 bits since m < 2^32.
  FLASHKIT_HD int div(int n) const {
    const std::uint32_t u = std::uint32_t(n);
#ifdef __CUDA_ARCH__
    const std::uint32_t t = __umulhi(m, u);
#else
    const std::uint32_t t = std::uint32_t((std::uint64_t(m) * u) >> 32);
#endif
    return int((u + t) >> l);
  }
};

// d >= 1.
inline FastDiv make_fast_div(int d) {
  FastDiv f;
  f.d = d;
  while ((std::int64_t(1) << f.l) < d) ++f.l;
  const std::uint64_t pow = std::uint64_t(1) << f.l;
  f.m =
      pow == std::uint64_t(d) ? 0u : std::uint32_t(((std::uint64_t(1) << 32) * (pow - d)) / d + 1);
  return f;
}

}  // namespace flashkit::cuda
