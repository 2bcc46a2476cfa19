// What every CUDA benchmark program under bench/cuda needs: checked CUDA calls, a device buffer
// that frees itself, hash-generated inputs (uniform ones the host can recompute element by
// element, normal ones), a streaming read for the bandwidth ceiling, event timing, and the UTC
// stamp of a result file.
// Each benchmark is one translation unit, so the definitions here are `static` / `inline`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace flashkit::bench {

inline constexpr std::chrono::milliseconds kWarmupTime{50};

inline void check(cudaError_t s, const char* what) {
  if (s != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(s));
}

struct Buffer {
  void* p = nullptr;
  explicit Buffer(std::size_t bytes) {
    check(cudaMalloc(&p, bytes < 16 ? 16 : bytes), "cudaMalloc");
  }
  ~Buffer() { cudaFree(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

// Uniform values in [-1, 1) from a hash of the element index: fresh inputs, and the host can
// recompute any element for a reference without copying the tensor back.
__host__ __device__ inline float hashed_unit(std::int64_t i, std::uint32_t seed) {
  std::uint32_t x = std::uint32_t(i) * 2654435761u ^ std::uint32_t(i >> 32) * 0x9e3779b9u ^ seed;
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return float(x >> 8) * (2.0f / 16777216.0f) - 1.0f;
}

static __global__ void fill_bf16(__nv_bfloat16* p, std::int64_t n, std::uint32_t seed) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    p[i] = __float2bfloat16_rn(hashed_unit(i, seed));
  }
}

// Standard normal values (Box-Muller over two hashed uniforms), as torch.randn gives the Python
// suite and its peers. The compute-bound benchmarks take these, so that their A/Bs run on the
// record's distribution (on the H200 the sm90 forward read 0-1.7 % slower on them than on uniform
// values in [-1, 1): docs/kernels/sm90_fwd.md, v33).
static __global__ void fill_bf16_normal(__nv_bfloat16* p, std::int64_t n, std::uint32_t seed) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const float u = 0.5f * (1.0f - hashed_unit(2 * i, seed));  // (0, 1]
    const float r = sqrtf(-2.0f * logf(u));
    p[i] = __float2bfloat16_rn(r * cospif(hashed_unit(2 * i + 1, seed)));
  }
}

// Reads n 16-byte vectors once; the xor keeps the compiler from dropping the loads.
static __global__ void read_all(const uint4* p, std::int64_t n, unsigned* sink) {
  unsigned acc = 0;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const uint4 v = p[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) *sink = acc;
}

// Median milliseconds of `reps` runs (run(i) gets the run's index, e.g. to rotate input sets)
// after a warm-up, one event pair per run. The warm-up is `warmup` runs and at least 50 ms of
// them, each run waited for, as the Python suite warms each impl up before its turn
// (python/flashkit/bench.py, Timer): after a few runs only, the timed runs were a ~10 ms burst
// from a GPU that had idled through the host's work, where the suite times kernels under
// sustained load, and the two read one kernel pair up to 8 % apart (docs/kernels/sm90_fwd.md,
// v37).
inline double median_ms(const std::function<void(int)>& run, int warmup, int reps,
                        cudaStream_t stream = nullptr) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < warmup || std::chrono::steady_clock::now() - start < kWarmupTime; ++i) {
    run(i);
    check(cudaStreamSynchronize(stream), "warm-up");
  }
  std::vector<cudaEvent_t> ev(2 * std::size_t(reps));
  for (auto& e : ev) check(cudaEventCreate(&e), "cudaEventCreate");
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(ev[2 * std::size_t(i)], stream);
    run(i);
    cudaEventRecord(ev[2 * std::size_t(i) + 1], stream);
  }
  check(cudaStreamSynchronize(stream), "timed runs");
  std::vector<double> ms(static_cast<std::size_t>(reps));
  for (int i = 0; i < reps; ++i) {
    float t = 0;
    cudaEventElapsedTime(&t, ev[2 * std::size_t(i)], ev[2 * std::size_t(i) + 1]);
    ms[std::size_t(i)] = t;
  }
  for (auto& e : ev) cudaEventDestroy(e);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

inline std::string now_utc() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

}  // namespace flashkit::bench
