// The sgemm yardstick through OpenBLAS (built when CMake finds it).
#include <cblas.h>

#include <random>
#include <string>
#include <vector>

#include "sgemm.hpp"
#include "timer.hpp"

namespace flashkit::app {

namespace {

// 2048^3: 17 GFLOP, long enough to reach the steady rate, short enough (~0.1 s) to repeat.
constexpr int kSize = 2048;
constexpr int kRepeats = 3;

// OpenBLAS falls back to its SSE3 "Prescott" kernels on a CPU it cannot identify (virtual
// machines often hide the model), which understates an AVX2 or AVX-512 machine 1.5-3x. The
// choice is made when the library loads, before main, so the command can only say so.
std::string kernel_warning() {
  if (std::string(openblas_get_corename()) != "Prescott" || !__builtin_cpu_supports("avx2")) {
    return "";
  }
  return std::string(
             "OpenBLAS did not recognise this CPU and ran its SSE3 kernels; "
             "OPENBLAS_CORETYPE=") +
         (__builtin_cpu_supports("avx512f") ? "SkylakeX" : "Haswell") + " measures its vector ones";
}

}  // namespace

std::optional<SgemmRate> measure_sgemm() {
  const std::size_t n = std::size_t(kSize) * kSize;
  std::vector<float> a(n), b(n), c(n);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = dist(rng);
    b[i] = dist(rng);
  }
  const auto run = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, kSize, kSize, kSize, 1.0f, a.data(),
                kSize, b.data(), kSize, 0.0f, c.data(), kSize);
  };
  run();  // warm-up: thread pool start, page faults
  std::vector<double> ms;
  for (int r = 0; r < kRepeats; ++r) {
    const Stopwatch watch;
    run();
    ms.push_back(watch.elapsed_ms());
  }
  const double flops = 2.0 * double(kSize) * kSize * kSize;
  return SgemmRate{flops / (median(ms) * 1e6),
                   std::string(openblas_get_config()) + " (" +
                       std::to_string(openblas_get_num_threads()) + " threads)",
                   kernel_warning()};
}

}  // namespace flashkit::app
