// Backward timing on one CUDA device for profiling the tensor-core backward alone: BENCH.md's
// prefill grid shapes (bf16, B * N = 16384 tokens, H = 2048 / d), CUDA events, warm-up, median
// of 20 runs, hashed random inputs; out and lse come from our forward on the same inputs.
// TFLOP/s counts 2.5x the forward's FLOPs (FlashAttention's convention, as the Python suite).
//
//   flashkit_backward_bench [--config D,N,CAUSAL ...] [--deterministic]
//
// The committed prefill_bwd numbers come from `python -m flashkit.bench --suite prefill_bwd`,
// which runs the torch SDPA peers in the same process; this program has no peers and is what a
// profiler (ncu -k regex:dkdv) is pointed at.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "bench_support.cuh"
#include "flashkit/flashkit.hpp"

namespace {

using namespace flashkit::bench;

struct Config {
  int d, n;
  bool causal;
  std::int64_t batch() const { return 16384 / n; }
  std::int64_t heads() const { return 2048 / d; }
  double flops() const {
    const double f = 2.5 * 4.0 * double(batch()) * double(heads()) * double(n) * n * d;
    return causal ? f / 2 : f;
  }
};

double run_config(const Config& c, bool deterministic) {
  const std::size_t elems =
      std::size_t(c.batch()) * std::size_t(c.n) * std::size_t(c.heads()) * std::size_t(c.d);
  Buffer q(elems * 2), k(elems * 2), v(elems * 2), o(elems * 2), dout(elems * 2), dq(elems * 2),
      dk(elems * 2), dv(elems * 2), lse(std::size_t(c.batch() * c.heads()) * c.n * 4);
  const auto seed = std::uint32_t(c.d * 131 + c.n);
  int s = 0;
  for (Buffer* b : {&q, &k, &v, &dout}) {
    fill_bf16_normal<<<1024, 256>>>(b->as<__nv_bfloat16>(), std::int64_t(elems),
                                    seed + std::uint32_t(s++));
  }
  using flashkit::Device;
  using flashkit::DType;
  using flashkit::Tensor;
  const std::int64_t b = c.batch(), n = c.n, h = c.heads(), d = c.d;
  auto bnhd = [&](const Buffer& buf) {
    return Tensor(buf.p, DType::bf16, {b, n, h, d}, Device::cuda(0));
  };
  flashkit::AttentionArgs f;
  f.q = bnhd(q);
  f.k = bnhd(k);
  f.v = bnhd(v);
  f.out = bnhd(o);
  f.lse = Tensor(lse.p, DType::f32, {b, h, n}, Device::cuda(0));
  f.mask.causal = c.causal;
  flashkit::attention_forward(f);
  flashkit::BackwardArgs a;
  static_cast<flashkit::AttentionProblem&>(a) = f;
  a.deterministic = deterministic;
  a.out = f.out;
  a.lse = f.lse;
  a.dout = bnhd(dout);
  a.dq = bnhd(dq);
  a.dk = bnhd(dk);
  a.dv = bnhd(dv);
  return median_ms([&](int) { flashkit::attention_backward(a); }, 3, 20);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<Config> configs;
  bool deterministic = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    int d = 0, n = 0, causal = 0;
    if (arg == "--config" && i + 1 < argc &&
        std::sscanf(argv[++i], "%d,%d,%d", &d, &n, &causal) == 3 && d > 0 && n > 0 &&
        16384 % n == 0 && 2048 % d == 0) {
      configs.push_back({d, n, causal != 0});
    } else if (arg == "--deterministic") {
      deterministic = true;
    } else {
      std::fprintf(stderr, "usage: %s [--config D,N,CAUSAL ...] [--deterministic]\n", argv[0]);
      return 2;
    }
  }
  if (configs.empty()) {
    for (int d : {64, 128, 256})
      for (bool causal : {false, true})
        for (int n : {512, 1024, 2048, 4096, 8192, 16384}) configs.push_back({d, n, causal});
  }
  try {
    std::printf("%4s %6s %6s %9s %8s\n", "d", "n", "causal", "ms", "TFLOP/s");
    for (const Config& c : configs) {
      const double ms = run_config(c, deterministic);
      std::printf("%4d %6d %6s %9.3f %8.1f\n", c.d, c.n, c.causal ? "yes" : "no", ms,
                  c.flops() / (ms * 1e-3) / 1e12);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench failed: %s\n", e.what());
    return 1;
  }
}
