// Ring attention timing: one sequence of N tokens (bf16, 2048 / d heads, batch 1, zigzag layout)
// sharded over R ranks, a thread each, rank r on device r % (devices present), against
// attention_forward / attention_backward of the whole sequence on one device in the same process.
// With as many devices as ranks the ratio is the ring's speedup (ideal R); with the ranks sharing
// one device it is what the ring costs over one call for the same work (ideal 1: the chunk
// pairs' extra launches, the merges, the copies and the per-call header check).
//
//   flashkit_ring_bench [--ranks R] [--tokens N] [--d D] [--causal 0|1] [--nccl] [--one-stream]
//                       [--out FILE] [--commit SHA]
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

struct Result {
  double ring_fwd, ring_bwd, one_fwd, one_bwd;
};

Result run(const Config& c) {
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
  const double one_fwd = median_ms([&](int) { flashkit::attention_forward(f); }, kWarmup, kReps);
  const double one_bwd = median_ms([&](int) { flashkit::attention_backward(b); }, kWarmup, kReps);
  return {slowest_median(times.fwd), slowest_median(times.bwd), one_fwd, one_bwd};
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  std::string out_path, commit = "unknown";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool value = i + 1 < argc;
    if (a == "--ranks" && value) {
      c.ranks = std::atoi(argv[++i]);
    } else if (a == "--tokens" && value) {
      c.tokens = std::atoll(argv[++i]);
    } else if (a == "--d" && value) {
      c.d = std::atoi(argv[++i]);
    } else if (a == "--causal" && value) {
      c.causal = std::atoi(argv[++i]) != 0;
    } else if (a == "--nccl") {
      c.nccl = true;
    } else if (a == "--one-stream") {
      c.two_streams = false;
    } else if (a == "--out" && value) {
      out_path = argv[++i];
    } else if (a == "--commit" && value) {
      commit = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: %s [--ranks R] [--tokens N] [--d D] [--causal 0|1] [--nccl] "
                   "[--one-stream] [--out FILE] [--commit SHA]\n",
                   argv[0]);
      return 2;
    }
  }
  if (c.ranks < 1 || c.tokens % (2 * c.ranks) != 0) {
    std::fprintf(stderr, "--tokens must be a multiple of 2 x --ranks (zigzag chunks)\n");
    return 2;
  }
  try {
    const int devices = device_count();
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    const Result r = run(c);
    const double per_device = double(c.ranks) / std::min(c.ranks, devices);
    const std::string config =
        "{\"ranks\": " + std::to_string(c.ranks) +
        ", \"devices\": " + std::to_string(std::min(c.ranks, devices)) +
        ", \"tokens\": " + std::to_string(c.tokens) + ", \"d\": " + std::to_string(c.d) +
        ", \"heads\": " + std::to_string(c.heads()) +
        ", \"causal\": " + (c.causal ? "true" : "false") + ", \"comm\": \"" +
        (c.nccl ? "nccl" : "in-process") + "\", \"streams\": " + (c.two_streams ? "2" : "1") + "}";
    std::printf("%s, %d rank(s) on %d device(s) (%.0f a device), %lld tokens, d %d, %s, %s\n",
                prop.name, c.ranks, std::min(c.ranks, devices), per_device,
                static_cast<long long>(c.tokens), c.d, c.causal ? "causal" : "full",
                c.nccl ? "nccl" : "in-process");
    std::printf("  forward:  ring %.3f ms, one device %.3f ms: %.2fx (%.0f TFLOP/s a device)\n",
                r.ring_fwd, r.one_fwd, r.one_fwd / r.ring_fwd,
                c.fwd_flops() / (r.ring_fwd * 1e9) / std::min(c.ranks, devices));
    std::printf("  backward: ring %.3f ms, one device %.3f ms: %.2fx\n", r.ring_bwd, r.one_bwd,
                r.one_bwd / r.ring_bwd);
    if (!out_path.empty()) {
      std::ofstream o(out_path);
      o << "{\"suite\": \"ring\", \"commit\": \"" << commit << "\", \"date\": \"" << now_utc()
        << "\", \"device\": \"" << prop.name << "\",\n \"rows\": [\n"
        << "  {\"impl\": \"flashkit-ring\", \"config\": " << config
        << ", \"fwd_ms\": " << r.ring_fwd << ", \"bwd_ms\": " << r.ring_bwd << "},\n"
        << "  {\"impl\": \"flashkit\", \"config\": " << config << ", \"fwd_ms\": " << r.one_fwd
        << ", \"bwd_ms\": " << r.one_bwd << "}\n]}\n";
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
