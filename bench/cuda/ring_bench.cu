// Ring attention timing: one sequence of N tokens (bf16, 2048 / d heads, batch 1, zigzag layout)
// sharded over R ranks, a thread each, rank r on device r % (devices present), against
// attention_forward / attention_backward of the whole sequence on one device in the same process.
// With as many devices as ranks the ratio is the ring's speedup (ideal R); with the ranks sharing
// one device it is what the ring costs over one call for the same work (ideal 1: the chunk
// pairs' extra launches, the merges, the copies and the per-call header check).
//
//   flashkit_ring_bench [--config RANKS,TOKENS,D,CAUSAL ...] [--out DIR] [--commit SHA]
//
// Each config runs three ways: the ring with its shards on a second stream (`flashkit-ring`),
// the ring with every shift in line on one stream (`flashkit-ring-1stream`), and one device's call
// on the whole sequence (`flashkit`); DIR/ring.json gets a row per way and pass.
//
// Per timed call, each rank records CUDA events around its own call on its stream; the call's
// time is the slowest rank's (the ring's shifts keep the ranks in step). Median of 20 calls after
// 5 warm-up calls, every rank running the same number (a ring cannot warm up for a time).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench_support.cuh"
#include "flashkit/flashkit.hpp"

namespace {

using namespace flashkit::bench;
using flashkit::Device;
using flashkit::DType;
using flashkit::Tensor;

constexpr int kWarmup = 5;
constexpr int kReps = 20;

struct Config {
  int ranks = 2;
  std::int64_t tokens = 32768;
  int d = 128;
  bool causal = true;
  bool nccl = false;
  bool two_streams = true;
  std::int64_t heads() const { return 2048 / d; }
  double fwd_flops() const {
    const double f = 4.0 * double(heads()) * double(tokens) * double(tokens) * d;
    return causal ? f / 2 : f;
  }
};

int device_count() {
  int n = 0;
  check(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
  return n;
}

// q, k, v, dout and the outputs of `tokens` rows on the current device, filled from `seed`.
struct Tensors {
  std::vector<std::unique_ptr<Buffer>> bufs;
  Tensor q, k, v, out, dout, dq, dk, dv, lse;
  Tensors(std::int64_t tokens, std::int64_t heads, int d, std::uint32_t seed) {
    int device = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    const std::int64_t elems = tokens * heads * d;
    auto make = [&](DType dtype, std::int64_t n) {
      bufs.push_back(std::make_unique<Buffer>(std::size_t(n) * (dtype == DType::bf16 ? 2 : 4)));
      return bufs.back()->p;
    };
    auto bnhd = [&](DType dtype) {
      return Tensor(make(dtype, elems), dtype, {1, tokens, heads, std::int64_t(d)},
                    Device::cuda(device));
    };
    q = bnhd(DType::bf16);
    k = bnhd(DType::bf16);
    v = bnhd(DType::bf16);
    dout = bnhd(DType::bf16);
    out = bnhd(DType::bf16);
    dq = bnhd(DType::bf16);
    dk = bnhd(DType::bf16);
    dv = bnhd(DType::bf16);
    lse = Tensor(make(DType::f32, heads * tokens), DType::f32, {1, heads, tokens},
                 Device::cuda(device));
    std::uint32_t s = seed;
    for (const Tensor* t : {&q, &k, &v, &dout}) {
      fill_bf16_normal<<<1024, 256>>>(t->data_as<__nv_bfloat16>(), elems, s++);
    }
    check(cudaDeviceSynchronize(), "fill");
  }
};

struct Times {
  std::vector<std::vector<float>> fwd, bwd;  // [rank][call]
};

void run_rank(const Config& c, flashkit::RingCommunicator& comm, int rank, Times& times) {
  check(cudaSetDevice(rank % device_count()), "cudaSetDevice");
  const std::int64_t local = c.tokens / c.ranks;
  Tensors t(local, c.heads(), c.d, std::uint32_t(1000 + rank));
  cudaStream_t main = nullptr, side = nullptr;
  check(cudaStreamCreateWithFlags(&main, cudaStreamNonBlocking), "cudaStreamCreate");
  check(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), "cudaStreamCreate");
  flashkit::RingAttentionArgs a;
  a.q = t.q;
  a.k = t.k;
  a.v = t.v;
  a.mask.causal = c.causal;
  a.comm = &comm;
  a.stream = main;
  a.comm_stream = c.two_streams ? side : nullptr;
  a.out = t.out;
  a.lse = t.lse;
  flashkit::RingBackwardArgs g;
  static_cast<flashkit::RingProblem&>(g) = a;
  g.out = t.out;
  g.lse = t.lse;
  g.dout = t.dout;
  g.dq = t.dq;
  g.dk = t.dk;
  g.dv = t.dv;
  cudaEvent_t ev[3];
  for (cudaEvent_t& e : ev) check(cudaEventCreate(&e), "cudaEventCreate");
  for (int i = 0; i < kWarmup + kReps; ++i) {
    check(cudaEventRecord(ev[0], main), "cudaEventRecord");
    flashkit::ring_attention_forward(a);
    check(cudaEventRecord(ev[1], main), "cudaEventRecord");
    flashkit::ring_attention_backward(g);
    check(cudaEventRecord(ev[2], main), "cudaEventRecord");
    check(cudaStreamSynchronize(main), "ring call");
    float f = 0, b = 0;
    cudaEventElapsedTime(&f, ev[0], ev[1]);
    cudaEventElapsedTime(&b, ev[1], ev[2]);
    if (i >= kWarmup) {
      times.fwd[std::size_t(rank)].push_back(f);
      times.bwd[std::size_t(rank)].push_back(b);
    }
  }
  for (cudaEvent_t e : ev) cudaEventDestroy(e);
  cudaStreamDestroy(main);
  cudaStreamDestroy(side);
}

// Median over calls of the slowest rank's time.
double slowest_median(const std::vector<std::vector<float>>& per_rank) {
  std::vector<double> calls;
  for (std::size_t i = 0; i < per_rank[0].size(); ++i) {
    double worst = 0;
    for (const auto& r : per_rank) worst = std::max(worst, double(r[i]));
    calls.push_back(worst);
  }
  std::sort(calls.begin(), calls.end());
  return calls[calls.size() / 2];
}

struct RingTimes {
  double fwd, bwd;
};

RingTimes run_ring(const Config& c) {
  Times times;
  times.fwd.resize(std::size_t(c.ranks));
  times.bwd.resize(std::size_t(c.ranks));
  std::vector<std::unique_ptr<flashkit::RingCommunicator>> ring;
  flashkit::NcclRingId id;
  if (c.nccl) {
    id = flashkit::nccl_ring_id();
  } else {
    ring = flashkit::make_in_process_ring(c.ranks);
  }
  std::vector<std::string> errors(std::size_t(c.ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < c.ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        std::unique_ptr<flashkit::RingCommunicator> own;
        if (c.nccl) {
          check(cudaSetDevice(r % device_count()), "cudaSetDevice");
          own = flashkit::make_nccl_ring(id, c.ranks, r);
        }
        run_rank(c, c.nccl ? *own : *ring[std::size_t(r)], r, times);
      } catch (const std::exception& e) {
        errors[std::size_t(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < c.ranks; ++r) {
    if (!errors[std::size_t(r)].empty()) {
      throw std::runtime_error("rank " + std::to_string(r) + ": " + errors[std::size_t(r)]);
    }
  }
  return {slowest_median(times.fwd), slowest_median(times.bwd)};
}

// attention_forward / attention_backward of the whole sequence on device 0.
RingTimes run_one_device(const Config& c) {
  check(cudaSetDevice(0), "cudaSetDevice");
  Tensors whole(c.tokens, c.heads(), c.d, 7);
  flashkit::AttentionArgs f;
  f.q = whole.q;
  f.k = whole.k;
  f.v = whole.v;
  f.mask.causal = c.causal;
  f.out = whole.out;
  f.lse = whole.lse;
  flashkit::BackwardArgs b;
  static_cast<flashkit::AttentionProblem&>(b) = f;
  b.out = whole.out;
  b.lse = whole.lse;
  b.dout = whole.dout;
  b.dq = whole.dq;
  b.dk = whole.dk;
  b.dv = whole.dv;
  return {median_ms([&](int) { flashkit::attention_forward(f); }, kWarmup, kReps),
          median_ms([&](int) { flashkit::attention_backward(b); }, kWarmup, kReps)};
}

}  // namespace

// One JSON row: `impl` on `c` for one pass, with its per-device TFLOP/s and, for the ring rows,
// the efficiency against one device (BENCH.md: 85-90 % of one GPU's throughput on 8 GPUs).
std::string row(const char* impl, const Config& c, const char* pass, double ms, double one_ms,
                int used) {
  const double flops = c.fwd_flops() * (pass[0] == 'b' ? 2.5 : 1.0);
  char buf[640];
  std::snprintf(buf, sizeof buf,
                "  {\"impl\": \"%s\", \"config\": {\"dtype\": \"bf16\", \"d\": %d, \"n\": %lld, "
                "\"causal\": %s, \"batch\": 1, \"heads\": %lld, \"ranks\": %d, \"devices\": %d, "
                "\"comm\": \"%s\", \"pass\": \"%s\"}, \"ms\": %.4f, \"tflops_per_device\": %.1f, "
                "\"efficiency\": %.3f}",
                impl, c.d, static_cast<long long>(c.tokens), c.causal ? "true" : "false",
                static_cast<long long>(c.heads()), c.ranks, used, c.nccl ? "nccl" : "in-process",
                pass, ms, flops / (ms * 1e9) / used, one_ms / (ms * used));
  return buf;
}

int usage(const char* argv0) {
  std::fprintf(
      stderr,
      "usage: %s [--config RANKS,TOKENS,D,CAUSAL ...] [--out DIR] [--commit SHA]\n"
      "  default: every power-of-two ring up to the devices present over 16384 tokens a rank\n"
      "  (on a one-GPU machine, 1 and 2 ranks on it over 16384 in all), d 128, causal and not;\n"
      "  NCCL where there are several devices and the build has it\n",
      argv0);
  return 2;
}

int main(int argc, char** argv) {
  std::vector<Config> configs;
  std::string out_dir, commit = "unknown";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    Config c;
    long long tokens = 0;
    int causal = 0;
    if (a == "--config" && i + 1 < argc &&
        std::sscanf(argv[i + 1], "%d,%lld,%d,%d", &c.ranks, &tokens, &c.d, &causal) == 4) {
      ++i;
      c.tokens = tokens;
      c.causal = causal != 0;
      configs.push_back(c);
    } else if (a == "--out" && i + 1 < argc) {
      out_dir = argv[++i];
    } else if (a == "--commit" && i + 1 < argc) {
      commit = argv[++i];
    } else {
      return usage(argv[0]);
    }
  }
  try {
    const int devices = device_count();
    const bool nccl = devices > 1 && flashkit::build_info().nccl;
    if (configs.empty()) {
      // On one device, one rank too: the ring's own cost around a single call's work.
      for (int ranks = devices > 1 ? 2 : 1; ranks <= std::max(devices, 2); ranks *= 2) {
        for (bool causal : {true, false}) {
          Config c;
          c.ranks = ranks;
          c.tokens = devices > 1 ? 16384 * std::int64_t(ranks) : 16384;  // 16k a device
          c.causal = causal;
          configs.push_back(c);
        }
      }
    }
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    std::vector<std::string> rows;
    for (Config c : configs) {
      if (c.ranks < 1 || c.tokens % (2 * c.ranks) != 0 || 2048 % c.d != 0) {
        std::fprintf(stderr,
                     "config %d,%lld,%d: tokens must be a multiple of 2 x ranks, d divide 2048\n",
                     c.ranks, static_cast<long long>(c.tokens), c.d);
        return 2;
      }
      c.nccl = nccl && c.ranks <= devices;
      const int used = std::min(c.ranks, devices);
      const RingTimes one = run_one_device(c);
      Config one_stream = c;
      one_stream.two_streams = false;
      const RingTimes ring = run_ring(c), serial = run_ring(one_stream);
      std::printf("%s: %d rank(s) on %d device(s), %s, %lld tokens, d %d, %s\n", prop.name, c.ranks,
                  used, c.nccl ? "nccl" : "in-process", static_cast<long long>(c.tokens), c.d,
                  c.causal ? "causal" : "full");
      std::printf(
          "  forward:  one device %.3f ms; ring %.3f ms (%.2fx, %.0f %% of one device's "
          "throughput a device), shifts in line %.3f ms\n",
          one.fwd, ring.fwd, one.fwd / ring.fwd, 100 * one.fwd / (ring.fwd * used), serial.fwd);
      std::printf(
          "  backward: one device %.3f ms; ring %.3f ms (%.2fx, %.0f %%), shifts in line "
          "%.3f ms\n",
          one.bwd, ring.bwd, one.bwd / ring.bwd, 100 * one.bwd / (ring.bwd * used), serial.bwd);
      std::fflush(stdout);
      for (const char* pass : {"fwd", "bwd"}) {
        const bool f = pass[0] == 'f';
        rows.push_back(
            row("flashkit-ring", c, pass, f ? ring.fwd : ring.bwd, f ? one.fwd : one.bwd, used));
        rows.push_back(row("flashkit-ring-1stream", c, pass, f ? serial.fwd : serial.bwd,
                           f ? one.fwd : one.bwd, used));
        rows.push_back(row("flashkit", c, pass, f ? one.fwd : one.bwd, f ? one.fwd : one.bwd, 1));
      }
    }
    if (!out_dir.empty()) {
      std::ofstream o(out_dir + "/ring.json");
      o << "{\"suite\": \"ring\", \"commit\": \"" << commit << "\", \"date\": \"" << now_utc()
        << "\", \"device\": \"" << prop.name << "\", \"devices\": " << devices
        << ",\n \"protocol\": {\"warmup\": " << kWarmup << ", \"reps\": " << kReps
        << ", \"statistic\": \"median over calls of the slowest rank's CUDA-event time\"},\n"
        << " \"rows\": [\n";
      for (std::size_t i = 0; i < rows.size(); ++i)
        o << rows[i] << (i + 1 < rows.size() ? ",\n" : "\n");
      o << "]}\n";
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
