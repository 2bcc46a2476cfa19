// Paged decode benchmark on one CUDA device, BENCH.md's decode grid: GQA 32 query / 8 KV heads,
// d 128, one query token per sequence, (batch, kv_len) in {(1, 32k), (16, 8k), (64, 4k),
// (128, 2k)}, bf16 and e4m3 pages of 16 and 256 tokens (page ids shuffled), the split plan's
// choice (num_splits 0). Each call is captured in a CUDA graph (what serving engines replay for
// decode; it also proves the call capturable), timed with CUDA events after a warm-up, median of
// 30; the KV is rotated over copies when one copy is under 3x the L2. Sampled outputs are checked
// against a double-precision host reference before the time is kept, and the streaming-read
// ceiling (16-byte loads over 8 GiB) is measured in the same run. Writes BENCH.md's schema.
//
//   flashkit_decode_bench --out FILE.json [--commit SHA] [--no-ceiling] [--config B,KV ...]
//                         [--kv-sets N] [--splits N] [--heads HQ,HKV] [--timeline]
// (--config: only these (batch, kv_len) pairs, e.g. to profile one shape; --kv-sets: rotate N
// copies of the KV instead of the L2 rule's count, e.g. 1 to replay one copy as the Python
// suite does; --splits: num_splits N instead of the plan's choice; --heads: HQ query heads over
// HKV KV heads instead of 32 / 8, e.g. 4,1 at 8x the batch reads the same bytes with each page
// holding one head's rows back to back; --timeline: each row's graph kernel by kernel as well,
// under CUPTI (kernel_timeline.hpp): where a split call's time goes between stage 1, the gap and
// the split merge)
//
// GB/s counts the K and V bytes: 2 * batch * kv_len * kv_heads * d * bytes per element (the f32
// e4m3 scales, 4 bytes per 16-token page and head, add 0.2 % and are not counted).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bench_support.cuh"
#include "flashkit/flashkit.hpp"
#include "kernel_timeline.hpp"

namespace {

using namespace flashkit::bench;

constexpr int kDim = 128;
// Uniform [-1, 1) over this scale fills e4m3's [-64, 64): full precision, no saturation.
constexpr float kFp8Scale = 1.0f / 64;
constexpr std::uint32_t kSeedK = 1, kSeedV = 2, kSeedQ = 3;

__host__ __device__ std::uint8_t e4m3_of(std::int64_t i, std::uint32_t seed) {
  return __nv_cvt_float_to_fp8(hashed_unit(i, seed) / kFp8Scale, __NV_SATFINITE, __NV_E4M3);
}

__global__ void fill_e4m3(std::uint8_t* p, std::int64_t n, std::uint32_t seed) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    p[i] = e4m3_of(i, seed);
  }
}

__global__ void fill_f32(float* p, std::int64_t n, float value) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    p[i] = value;
  }
}

// The value element i of a pool holds, as the kernels read it.
double stored_value(bool fp8, std::int64_t i, std::uint32_t seed) {
  if (fp8) {
    const __half h(__nv_cvt_fp8_to_halfraw(e4m3_of(i, seed), __NV_E4M3));
    return double(__half2float(h)) * kFp8Scale;
  }
  return __bfloat162float(__float2bfloat16_rn(hashed_unit(i, seed)));
}

double read_ceiling_gbs(int sms, cudaStream_t stream) {
  const std::size_t bytes = std::size_t(8) << 30;  // 8 GiB, far past the L2
  Buffer r(bytes), sink(4);
  check(cudaMemset(r.p, 1, bytes), "cudaMemset");
  const double ms = median_ms(
      [&](int) {
        read_all<<<unsigned(sms * 16), 512, 0, stream>>>(static_cast<const uint4*>(r.p),
                                                         std::int64_t(bytes / 16),
                                                         static_cast<unsigned*>(sink.p));
      },
      2, 20, stream);
  return double(bytes) / (ms * 1e-3) / 1e9;
}

struct Config {
  int batch, kv_len, page_size;
  bool fp8;
  int heads_q = 32, heads_kv = 8;  // BENCH.md's GQA 32 / 8
  double kv_bytes() const { return 2.0 * batch * double(kv_len) * heads_kv * kDim * (fp8 ? 1 : 2); }
};

struct Row {
  Config c;
  int num_splits;
  int kv_sets;  // KV copies rotated
  bool graph;
  double ms, gbs, max_err;
  Timeline timeline;  // empty unless --timeline
};

// Max |out - reference| over the query heads of KV heads 0 and 7 of the first and last sequence,
// the reference in double from the pool values the host recomputes.
double sampled_error(const Config& c, const std::vector<std::int32_t>& table, const void* d_out) {
  const std::int64_t pages = c.kv_len / c.page_size;
  std::vector<std::uint16_t> out(std::size_t(c.batch) * c.heads_q * kDim);
  check(cudaMemcpy(out.data(), d_out, out.size() * 2, cudaMemcpyDeviceToHost), "copy out");
  const double scale = 1.0 / std::sqrt(double(kDim));
  double worst = 0;
  std::vector<double> k(std::size_t(c.kv_len) * kDim), v(k.size()), s(std::size_t(c.kv_len));
  const std::vector<int> sequences =
      c.batch > 1 ? std::vector<int>{0, c.batch - 1} : std::vector<int>{0};
  for (int b : sequences) {
    for (int hk : {0, c.heads_kv - 1}) {
      for (int t = 0; t < c.kv_len; ++t) {
        const std::int64_t page = table[std::size_t(b * pages + t / c.page_size)];
        const std::int64_t row = ((page * c.page_size + t % c.page_size) * c.heads_kv + hk) * kDim;
        for (int e = 0; e < kDim; ++e) {
          k[std::size_t(t) * kDim + e] = stored_value(c.fp8, row + e, kSeedK);
          v[std::size_t(t) * kDim + e] = stored_value(c.fp8, row + e, kSeedV);
        }
      }
      for (int g = 0; g < c.heads_q / c.heads_kv; ++g) {
        const int h = hk * (c.heads_q / c.heads_kv) + g;
        const std::int64_t q0 = (std::int64_t(b) * c.heads_q + h) * kDim;
        double m = -1e300;
        for (int t = 0; t < c.kv_len; ++t) {
          double dot = 0;
          for (int e = 0; e < kDim; ++e) {
            dot += double(__bfloat162float(__float2bfloat16_rn(hashed_unit(q0 + e, kSeedQ)))) *
                   k[std::size_t(t) * kDim + e];
          }
          s[std::size_t(t)] = dot * scale;
          m = std::max(m, s[std::size_t(t)]);
        }
        double l = 0;
        for (double& x : s) l += (x = std::exp(x - m));
        for (int e = 0; e < kDim; ++e) {
          double o = 0;
          for (int t = 0; t < c.kv_len; ++t) o += s[std::size_t(t)] * v[std::size_t(t) * kDim + e];
          const std::uint32_t bits = std::uint32_t(out[std::size_t(q0 + e)]) << 16;
          float got;
          std::memcpy(&got, &bits, 4);
          worst = std::max(worst, std::abs(o / l - double(got)));
        }
      }
    }
  }
  return worst;
}

// kv_sets: copies of the KV rotated, 0 for the L2 rule (enough copies for 3x the L2, at most 4).
// splits: num_splits of every call, 0 for the plan's.
Row run_config(const Config& c, int sms, double l2_bytes, int kv_sets, int splits, bool timeline,
               cudaStream_t stream) {
  using flashkit::Device;
  using flashkit::DType;
  using flashkit::Tensor;
  const std::int64_t pages_per_seq = c.kv_len / c.page_size;
  const std::int64_t set_pages = c.batch * pages_per_seq;
  const int sets =
      kv_sets > 0 ? kv_sets : int(std::clamp(std::ceil(3 * l2_bytes / c.kv_bytes()), 1.0, 4.0));
  const std::int64_t num_pages = sets * set_pages;
  const std::int64_t pool_elems = num_pages * c.page_size * c.heads_kv * kDim;
  const std::size_t elem = c.fp8 ? 1 : 2;
  Buffer k(std::size_t(pool_elems) * elem), v(std::size_t(pool_elems) * elem);
  Buffer scales(std::size_t(num_pages) * c.heads_kv * 4);
  Buffer q(std::size_t(c.batch) * c.heads_q * kDim * 2),
      out(std::size_t(c.batch) * c.heads_q * kDim * 2);
  Buffer lse(std::size_t(c.batch) * c.heads_q * 4), lens(std::size_t(c.batch) * 4);
  Buffer tables(std::size_t(sets * set_pages) * 4);
  if (c.fp8) {
    fill_e4m3<<<1024, 256, 0, stream>>>(static_cast<std::uint8_t*>(k.p), pool_elems, kSeedK);
    fill_e4m3<<<1024, 256, 0, stream>>>(static_cast<std::uint8_t*>(v.p), pool_elems, kSeedV);
    fill_f32<<<64, 256, 0, stream>>>(static_cast<float*>(scales.p), num_pages * c.heads_kv,
                                     kFp8Scale);
  } else {
    fill_bf16<<<1024, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(k.p), pool_elems, kSeedK);
    fill_bf16<<<1024, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(v.p), pool_elems, kSeedV);
  }
  fill_bf16<<<64, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(q.p),
                                    std::int64_t(c.batch) * c.heads_q * kDim, kSeedQ);
  check(cudaGetLastError(), "fill kernels");

  // Set s owns pages [s * set_pages, (s + 1) * set_pages), handed out in a shuffled order.
  std::vector<std::int32_t> table(std::size_t(sets * set_pages));
  std::mt19937 rng(std::uint32_t(c.batch * 7 + c.page_size));
  for (int s = 0; s < sets; ++s) {
    const auto first = table.begin() + std::ptrdiff_t(s * set_pages);
    std::iota(first, first + std::ptrdiff_t(set_pages), std::int32_t(s * set_pages));
    std::shuffle(first, first + std::ptrdiff_t(set_pages), rng);
  }
  check(cudaMemcpy(tables.p, table.data(), table.size() * 4, cudaMemcpyHostToDevice), "tables");
  const std::vector<std::int32_t> seq_lens(std::size_t(c.batch), c.kv_len);
  check(cudaMemcpy(lens.p, seq_lens.data(), seq_lens.size() * 4, cudaMemcpyHostToDevice), "lens");

  const flashkit::PagedSplitPlan plan =
      flashkit::plan_paged_split(c.batch, 1, c.heads_q, c.heads_kv, kDim, c.kv_len, sms);
  const int num_splits = splits > 0 ? splits : plan.num_splits;
  const std::int64_t workspace_elems = std::max<std::int64_t>(
      num_splits > 1 ? flashkit::paged_workspace_elems(num_splits, c.batch, c.heads_q, kDim) : 0,
      1);
  Buffer workspace(std::size_t(workspace_elems) * 4);

  const Device dev = Device::cuda(0);
  const DType kv = c.fp8 ? DType::e4m3 : DType::bf16;
  std::vector<flashkit::PagedAttentionArgs> calls(static_cast<std::size_t>(sets));
  for (int s = 0; s < sets; ++s) {
    flashkit::PagedAttentionArgs& a = calls[std::size_t(s)];
    a.q = Tensor(q.p, DType::bf16, {c.batch, 1, c.heads_q, kDim}, dev);
    a.out = Tensor(out.p, DType::bf16, {c.batch, 1, c.heads_q, kDim}, dev);
    a.lse = Tensor(lse.p, DType::f32, {c.batch, c.heads_q, 1}, dev);
    a.kv.k_pages = Tensor(k.p, kv, {num_pages, c.page_size, c.heads_kv, kDim}, dev);
    a.kv.v_pages = Tensor(v.p, kv, {num_pages, c.page_size, c.heads_kv, kDim}, dev);
    if (c.fp8) {
      a.kv.k_scale = Tensor(scales.p, DType::f32, {num_pages, c.heads_kv}, dev);
      a.kv.v_scale = a.kv.k_scale;
    }
    a.kv.block_table = Tensor(static_cast<std::int32_t*>(tables.p) + s * set_pages, DType::i32,
                              {c.batch, pages_per_seq}, dev);
    a.kv.seq_lens = Tensor(lens.p, DType::i32, {c.batch}, dev);
    a.mask.causal = true;
    a.num_splits = splits;
    a.workspace = Tensor(workspace.p, DType::f32, {workspace_elems}, dev);
    a.stream = stream;
  }

  check(cudaMemsetAsync(out.p, 0xFF, std::size_t(c.batch) * c.heads_q * kDim * 2, stream),
        "poison");
  flashkit::paged_attention(calls[0]);
  check(cudaStreamSynchronize(stream), "first call");
  Row r{c, num_splits, sets, true, 0, 0, sampled_error(c, table, out.p), {}};

  // One graph per KV copy; direct calls if capture fails (then "graph": false in the row).
  std::vector<cudaGraphExec_t> graphs;
  for (const auto& a : calls) {
    cudaGraph_t g = nullptr;
    cudaGraphExec_t exec = nullptr;
    bool ok = cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) == cudaSuccess;
    try {
      if (ok) flashkit::paged_attention(a);
    } catch (const std::exception&) {
      ok = false;
    }
    ok = cudaStreamEndCapture(stream, &g) == cudaSuccess && ok;
    ok = ok && cudaGraphInstantiate(&exec, g, 0) == cudaSuccess;
    if (g != nullptr) cudaGraphDestroy(g);
    if (!ok) {
      cudaGetLastError();
      r.graph = false;
      break;
    }
    graphs.push_back(exec);
  }
  r.ms = median_ms(
      [&](int i) {
        const std::size_t s = std::size_t(i % sets);
        if (r.graph) {
          check(cudaGraphLaunch(graphs[s], stream), "cudaGraphLaunch");
        } else {
          flashkit::paged_attention(calls[s]);
        }
      },
      5, 30, stream);
  if (timeline && r.graph) r.timeline = graph_timeline(graphs, stream, 30);
  for (cudaGraphExec_t e : graphs) cudaGraphExecDestroy(e);
  r.gbs = c.kv_bytes() / (r.ms * 1e-3) / 1e9;
  return r;
}

void write_json(const std::string& path, const std::string& commit, const std::string& device,
                double read_gbs, const std::vector<Row>& rows) {
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  std::ofstream f(path);
  f << "{\"suite\": \"decode\", \"commit\": \"" << commit << "\", \"date\": \"" << now_utc()
    << "\", \"device\": \"" << device << "\",\n \"versions\": {\"cuda_runtime\": " << runtime
    << ", \"cuda_driver\": " << driver << ", \"flashkit\": \"" << flashkit::version()
    << "\"},\n \"ceilings\": {\"read_gbs\": " << read_gbs << "},\n \"rows\": [";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    f << (i ? ",\n  " : "\n  ") << "{\"impl\": \"" << (r.c.fp8 ? "flashkit-fp8" : "flashkit")
      << "\", \"config\": {\"batch\": " << r.c.batch << ", \"kv_len\": " << r.c.kv_len
      << ", \"page_size\": " << r.c.page_size << ", \"dtype\": \"" << (r.c.fp8 ? "e4m3" : "bf16")
      << "\", \"heads_q\": " << r.c.heads_q << ", \"heads_kv\": " << r.c.heads_kv
      << ", \"d\": " << kDim << ", \"q_len\": 1"
      << ", \"num_splits\": " << r.num_splits << "}, \"kv_sets\": " << r.kv_sets
      << ", \"graph\": " << (r.graph ? "true" : "false") << ", \"ms\": " << r.ms
      << ", \"gbs\": " << r.gbs << ", \"read_fraction\": " << (read_gbs > 0 ? r.gbs / read_gbs : 0)
      << ", \"max_abs_err_sampled\": " << r.max_err;
    if (!r.timeline.steps.empty()) {
      f << ", \"timeline\": {\"span_us\": " << r.timeline.span_us
        << ", \"kernels\": " << timeline_kernels_json(r.timeline) << "}";
    }
    f << "}";
  }
  f << "\n]}\n";
}

}  // namespace

int main(int argc, char** argv) {
  std::string out = "decode.json", commit = "unknown";
  bool ceiling = true, timeline = false;
  int kv_sets = 0, splits = 0, heads_q = 32, heads_kv = 8;
  std::vector<std::pair<int, int>> shapes = {{1, 32768}, {16, 8192}, {64, 4096}, {128, 2048}};
  bool chosen = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    std::pair<int, int> shape{};
    if (a == "--config" && has_value &&
        std::sscanf(argv[i + 1], "%d,%d", &shape.first, &shape.second) == 2 && shape.first > 0 &&
        shape.second > 0) {
      if (!chosen) shapes.clear();
      chosen = true;
      shapes.push_back(shape);
      ++i;
    } else if (a == "--out" && has_value) {
      out = argv[++i];
    } else if (a == "--commit" && has_value) {
      commit = argv[++i];
    } else if (a == "--no-ceiling") {
      ceiling = false;
    } else if (a == "--timeline" && timeline_available()) {
      timeline = true;
    } else if (a == "--kv-sets" && has_value && std::sscanf(argv[i + 1], "%d", &kv_sets) == 1 &&
               kv_sets >= 1 && kv_sets <= 8) {
      ++i;
    } else if (a == "--heads" && has_value &&
               std::sscanf(argv[i + 1], "%d,%d", &heads_q, &heads_kv) == 2 && heads_kv >= 1 &&
               heads_q >= heads_kv && heads_q % heads_kv == 0) {
      ++i;
    } else if (a == "--splits" && has_value && std::sscanf(argv[i + 1], "%d", &splits) == 1 &&
               splits >= 1 && splits <= 64) {
      ++i;
    } else {
      std::fprintf(stderr,
                   "usage: %s --out FILE.json [--commit SHA] [--no-ceiling] [--config BATCH,KV_LEN "
                   "...] [--kv-sets 1..8] [--splits 1..64] [--heads HEADS_Q,HEADS_KV] [--timeline "
                   "(built with CUPTI)]\n",
                   argv[0]);
      return 2;
    }
  }
  try {
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    cudaStream_t stream = nullptr;
    check(cudaStreamCreate(&stream), "cudaStreamCreate");
    const double read_gbs = ceiling ? read_ceiling_gbs(prop.multiProcessorCount, stream) : 0;
    std::printf("device %s: streaming read %.0f GB/s\n", prop.name, read_gbs);
    std::vector<Row> rows;
    for (bool fp8 : {false, true}) {
      for (int page_size : {16, 256}) {
        for (auto [batch, kv_len] : shapes) {
          rows.push_back(run_config({batch, kv_len, page_size, fp8, heads_q, heads_kv},
                                    prop.multiProcessorCount, double(prop.l2CacheSize), kv_sets,
                                    splits, timeline, stream));
        }
      }
    }
    write_json(out, commit, prop.name, read_gbs, rows);
    std::printf("%-13s %5s %6s %5s %6s %6s %9s %8s %6s %9s\n", "impl", "batch", "kv_len", "page",
                "splits", "graph", "ms", "GB/s", "ceil%", "max_err");
    bool ok = true;
    for (const Row& r : rows) {
      std::printf("%-13s %5d %6d %5d %6d %6s %9.4f %8.0f %5.1f%% %9.2e\n",
                  r.c.fp8 ? "flashkit-fp8" : "flashkit", r.c.batch, r.c.kv_len, r.c.page_size,
                  r.num_splits, r.graph ? "yes" : "no", r.ms, r.gbs,
                  read_gbs > 0 ? 100 * r.gbs / read_gbs : 0.0, r.max_err);
      ok = ok && r.max_err < 1e-2;  // bf16 outputs below 1: a couple of ulps
    }
    for (const Row& r : rows) {
      if (r.timeline.steps.empty()) continue;
      std::printf("\n%s batch %d, kv_len %d, page %d, %d splits: span %.1f us\n",
                  r.c.fp8 ? "flashkit-fp8" : "flashkit", r.c.batch, r.c.kv_len, r.c.page_size,
                  r.num_splits, r.timeline.span_us);
      print_timeline_kernels(r.timeline);
    }
    cudaStreamDestroy(stream);
    if (!ok) std::printf("WARNING: a sampled output differs from the host reference\n");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench failed: %s\n", e.what());
    return 1;
  }
}
