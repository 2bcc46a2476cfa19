// Forward benchmark on one CUDA device, BENCH.md's protocol: the prefill grid (bf16, B * N =
// 16384 tokens, H = 2048 / d, d in {64, 128, 256}, N 512..16k, causal or not) and the lineage
// steps (naive, fa1, fa2) at a few N; CUDA events, warm-up, median of >= 20 runs, random inputs,
// a correctness check of every config on sampled rows before its time is recorded; the matmul
// and read ceilings measured in the same run. Writes BENCH.md's JSON schema.
//
//   flashkit_cuda_bench --suite prefill_fwd|lineage --out FILE.json [--commit SHA] [--quick]
//                       [--only D,N,CAUSAL [--only-automatic]] [--no-ceilings]
// --only runs one prefill config (for a profiler) on the sm80 kernel (Algo::fa2), or with
// --only-automatic on the kernel dispatch picks (the sm90 one on an H200); --no-ceilings skips
// the matmul/read runs.
//
// Peers (cuDNN and FA2 through torch SDPA) are measured by bench/peers/torch_sdpa.py on the
// same grid; its rows go into their own file until the Python package can run both in one process.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_support.cuh"
#include "flashkit/flashkit.hpp"

namespace {

using namespace flashkit::bench;

struct Ceilings {
  double matmul_tflops = 0, read_gbs = 0;
};

Ceilings measure_ceilings() {
  Ceilings c;
  const int n = 8192;
  Buffer a(std::size_t(n) * n * 2), b(std::size_t(n) * n * 2), d(std::size_t(n) * n * 2);
  fill_bf16_normal<<<1024, 256>>>(static_cast<__nv_bfloat16*>(a.p), std::int64_t(n) * n, 1);
  fill_bf16_normal<<<1024, 256>>>(static_cast<__nv_bfloat16*>(b.p), std::int64_t(n) * n, 2);
  cublasHandle_t h;
  if (cublasCreate(&h) == CUBLAS_STATUS_SUCCESS) {
    const float one = 1, zero = 0;
    const double ms = median_ms(
        [&](int) {
          cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a.p, CUDA_R_16BF, n, b.p,
                       CUDA_R_16BF, n, &zero, d.p, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT);
        },
        3, 20);
    c.matmul_tflops = 2.0 * n * double(n) * n / (ms * 1e-3) / 1e12;
    cublasDestroy(h);
  }
  const std::size_t bytes = std::size_t(8) << 30;  // 8 GiB, far past the 60 MB L2
  Buffer r(bytes), sink(4);
  check(cudaMemset(r.p, 1, bytes), "cudaMemset");
  const double ms = median_ms(
      [&](int) {
        read_all<<<132 * 16, 512>>>(static_cast<const uint4*>(r.p), std::int64_t(bytes / 16),
                                    static_cast<unsigned*>(sink.p));
      },
      2, 20);
  c.read_gbs = double(bytes) / (ms * 1e-3) / 1e9;
  return c;
}

struct Config {
  int d, n;
  bool causal;
  int batch() const { return 16384 / n; }
  int heads() const { return 2048 / d; }
  double flops() const {
    const double f = 4.0 * batch() * heads() * double(n) * n * d;
    return causal ? f / 2 : f;
  }
};

struct Row {
  std::string impl;
  Config c;
  double ms, tflops, max_err;
};

float bf16_to_float(std::uint16_t h) {
  const std::uint32_t u = std::uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Sampled-row check: rows 0, n/2 and n-1 of (batch 0, head 0) and of the last (batch, head),
// computed in double on the host from the bf16 inputs. Returns the max abs error.
double sampled_error(const Config& c, const void* q, const void* k, const void* v,
                     const void* out) {
  const int b_last = c.batch() - 1, h_last = c.heads() - 1, d = c.d, n = c.n, h_all = c.heads();
  double worst = 0;
  const std::size_t dim = static_cast<std::size_t>(d), keys_all = static_cast<std::size_t>(n) * dim;
  std::vector<std::uint16_t> qr(dim), kk(keys_all), vv(keys_all), orow(dim);
  for (auto [b, h] : {std::pair<int, int>{0, 0}, {b_last, h_last}}) {
    // Rows of [b, :, h, :] in [B, N, H, d] bf16: token stride H * d.
    const std::size_t tok = std::size_t(h_all) * d;
    const std::size_t first = std::size_t(b) * n * tok + std::size_t(h) * d;
    check(cudaMemcpy2D(kk.data(), dim * 2, static_cast<const std::uint16_t*>(k) + first, tok * 2,
                       dim * 2, std::size_t(n), cudaMemcpyDeviceToHost),
          "copy k rows");
    check(cudaMemcpy2D(vv.data(), dim * 2, static_cast<const std::uint16_t*>(v) + first, tok * 2,
                       dim * 2, std::size_t(n), cudaMemcpyDeviceToHost),
          "copy v rows");
    for (int i : {0, n / 2, n - 1}) {
      const std::size_t off = (std::size_t(b) * n + i) * tok + std::size_t(h) * d;
      cudaMemcpy(qr.data(), static_cast<const std::uint16_t*>(q) + off, d * 2,
                 cudaMemcpyDeviceToHost);
      cudaMemcpy(orow.data(), static_cast<const std::uint16_t*>(out) + off, d * 2,
                 cudaMemcpyDeviceToHost);
      const int keys = c.causal ? i + 1 : n;
      std::vector<double> s(static_cast<std::size_t>(keys));
      double m = -1e300;
      for (int j = 0; j < keys; ++j) {
        double dot = 0;
        for (int e = 0; e < d; ++e) {
          dot +=
              double(bf16_to_float(qr[std::size_t(e)])) * bf16_to_float(kk[std::size_t(j) * d + e]);
        }
        s[std::size_t(j)] = dot / std::sqrt(double(d));
        m = std::max(m, s[std::size_t(j)]);
      }
      double l = 0;
      for (auto& x : s) l += (x = std::exp(x - m));
      for (int e = 0; e < d; ++e) {
        double o = 0;
        for (int j = 0; j < keys; ++j)
          o += s[std::size_t(j)] * bf16_to_float(vv[std::size_t(j) * d + e]);
        worst = std::max(worst, std::abs(o / l - bf16_to_float(orow[std::size_t(e)])));
      }
    }
  }
  return worst;
}

Row run_config(const Config& c, flashkit::Algo algo, const char* impl, int reps) {
  const std::size_t elems = std::size_t(c.batch()) * c.n * c.heads() * c.d;
  Buffer q(elems * 2), k(elems * 2), v(elems * 2), o(elems * 2);
  const std::uint32_t seed = std::uint32_t(c.d * 131 + c.n);
  fill_bf16_normal<<<1024, 256>>>(static_cast<__nv_bfloat16*>(q.p), std::int64_t(elems), seed);
  fill_bf16_normal<<<1024, 256>>>(static_cast<__nv_bfloat16*>(k.p), std::int64_t(elems), seed + 1);
  fill_bf16_normal<<<1024, 256>>>(static_cast<__nv_bfloat16*>(v.p), std::int64_t(elems), seed + 2);
  check(cudaMemset(o.p, 0xFF, elems * 2), "poison");
  using flashkit::Device;
  using flashkit::DType;
  using flashkit::Tensor;
  const std::int64_t b = c.batch(), n = c.n, h = c.heads(), d = c.d;
  flashkit::AttentionArgs a;
  a.q = Tensor(q.p, DType::bf16, {b, n, h, d}, Device::cuda(0));
  a.k = Tensor(k.p, DType::bf16, {b, n, h, d}, Device::cuda(0));
  a.v = Tensor(v.p, DType::bf16, {b, n, h, d}, Device::cuda(0));
  a.out = Tensor(o.p, DType::bf16, {b, n, h, d}, Device::cuda(0));
  a.mask.causal = c.causal;
  a.algo = algo;
  flashkit::attention_forward(a);
  check(cudaDeviceSynchronize(), impl);
  Row r{impl, c, 0, 0, sampled_error(c, q.p, k.p, v.p, o.p)};
  r.ms = median_ms([&](int) { flashkit::attention_forward(a); }, 3, reps);
  r.tflops = c.flops() / (r.ms * 1e-3) / 1e12;
  return r;
}

void write_json(const std::string& path, const std::string& suite, const std::string& commit,
                const std::string& device, const Ceilings& ceil, const std::vector<Row>& rows) {
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  std::ofstream f(path);
  f << "{\"suite\": \"" << suite << "\", \"commit\": \"" << commit << "\", \"date\": \""
    << now_utc() << "\", \"device\": \"" << device
    << "\",\n \"versions\": {\"cuda_runtime\": " << runtime << ", \"cuda_driver\": " << driver
    << ", \"flashkit\": \"" << flashkit::version()
    << "\"},\n \"ceilings\": {\"matmul_tflops\": " << ceil.matmul_tflops
    << ", \"read_gbs\": " << ceil.read_gbs << "},\n \"rows\": [";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    f << (i ? ",\n  " : "\n  ") << "{\"impl\": \"" << r.impl
      << "\", \"config\": {\"dtype\": \"bf16\", \"d\": " << r.c.d << ", \"n\": " << r.c.n
      << ", \"causal\": " << (r.c.causal ? "true" : "false") << ", \"batch\": " << r.c.batch()
      << ", \"heads\": " << r.c.heads() << "}, \"ms\": " << r.ms << ", \"tflops\": " << r.tflops
      << ", \"max_abs_err_sampled\": " << r.max_err << "}";
  }
  f << "\n]}\n";
}

}  // namespace

int main(int argc, char** argv) {
  std::string suite = "prefill_fwd", out = "bench.json", commit = "unknown";
  bool quick = false, ceilings = true;
  int only_d = 0, only_n = 0, only_causal = 0;
  flashkit::Algo only_algo = flashkit::Algo::fa2;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--suite" && has_value) {
      suite = argv[++i];
    } else if (a == "--out" && has_value) {
      out = argv[++i];
    } else if (a == "--commit" && has_value) {
      commit = argv[++i];
    } else if (a == "--only" && has_value) {
      if (std::sscanf(argv[++i], "%d,%d,%d", &only_d, &only_n, &only_causal) != 3) return 2;
    } else if (a == "--only-automatic") {
      only_algo = flashkit::Algo::automatic;
    } else if (a == "--quick") {
      quick = true;
    } else if (a == "--no-ceilings") {
      ceilings = false;
    }
  }
  try {
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    const Ceilings ceil = ceilings ? measure_ceilings() : Ceilings{};
    std::printf("device %s: bf16 matmul %.0f TFLOP/s, read %.0f GB/s\n", prop.name,
                ceil.matmul_tflops, ceil.read_gbs);
    std::vector<Row> rows;
    const std::vector<int> ns =
        quick ? std::vector<int>{1024, 8192} : std::vector<int>{512, 1024, 2048, 4096, 8192, 16384};
    if (only_d > 0) {
      rows.push_back(run_config({only_d, only_n, only_causal != 0}, only_algo, "flashkit", 30));
    } else if (suite == "prefill_fwd") {
      for (int d : {64, 128, 256})
        for (bool causal : {false, true})
          for (int n : ns) {
            // automatic: the Hopper kernel on sm90, else the same sm80 kernel twice.
            rows.push_back(run_config({d, n, causal}, flashkit::Algo::automatic, "flashkit", 30));
            rows.push_back(run_config({d, n, causal}, flashkit::Algo::fa2, "flashkit-fa2", 30));
          }
    } else if (suite == "lineage") {
      for (int d : {64, 128})
        for (int n : {512, 1024, 2048}) {
          rows.push_back(run_config({d, n, false}, flashkit::Algo::naive, "flashkit-naive", 20));
          rows.push_back(run_config({d, n, false}, flashkit::Algo::fa1, "flashkit-fa1", 20));
          rows.push_back(run_config({d, n, false}, flashkit::Algo::fa2, "flashkit-fa2", 20));
        }
    } else {
      std::fprintf(stderr, "unknown suite %s\n", suite.c_str());
      return 2;
    }
    write_json(out, suite, commit, prop.name, ceil, rows);
    std::printf("%-16s %4s %6s %6s %5s %5s %9s %8s %9s\n", "impl", "d", "n", "causal", "B", "H",
                "ms", "TFLOP/s", "max_err");
    bool ok = true;
    for (const Row& r : rows) {
      std::printf("%-16s %4d %6d %6s %5d %5d %9.3f %8.1f %9.2e\n", r.impl.c_str(), r.c.d, r.c.n,
                  r.c.causal ? "yes" : "no", r.c.batch(), r.c.heads(), r.ms, r.tflops, r.max_err);
      ok = ok && r.max_err < 2e-2;  // bf16 outputs of size < 1: a few ulps
    }
    if (!ok) std::printf("WARNING: a sampled output differs from the host reference\n");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench failed: %s\n", e.what());
    return 1;
  }
}
