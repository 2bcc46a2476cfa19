// `flashkit bench`: the attention lineage measured the way the classic lesson did it — naive
// (S and P materialised) against flash (tiled, S and P never stored) over growing N — on the
// device the options pick, correctness checked before any time is printed.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench.hpp"
#include "bench_device.hpp"
#include "commands.hpp"
#include "format.hpp"
#include "progress.hpp"
#include "timer.hpp"

namespace flashkit::app {

namespace {

// The classic lesson's sweep, plus one long sequence that only flash can hold in memory.
const std::vector<std::int64_t> kDefaultSeqlens{512, 1024, 2048, 4096, 8192};
constexpr std::int64_t kLargeSeqlen = 65536;

// Naive may use at most this share of the device's memory: the rest is the system's and the
// inputs', and swapping would measure the disk.
constexpr double kMemoryShare = 0.5;
// Without --repeats: about this much timing per measurement, within [kMinRepeats, kMaxRepeats]
// runs, which keeps the default sweep near a minute and a half on two cores.
constexpr double kMeasureMs = 4000.0;
constexpr int kMinRepeats = 3;
constexpr int kMaxRepeats = 20;
// Progress lines: a warm-up of more FLOPs than this takes seconds on a CPU (a GPU says nothing
// until N is far larger); timed runs report when the warm-up took longer than kLongRunMs.
constexpr double kLongRunFlops = 5e10;
constexpr double kLongRunMs = 1000.0;
// FA1 runs one CTA per (sequence, head), at ~8 GFLOP/s on the H200 (fp32 FMAs of one SM): past
// this many FLOPs per head a run takes over 12 s (N = 16384 at d = 64 is 6.9e10, 8.7 s; 131072
// would be 9 minutes), so such rows skip it.
constexpr double kFa1MaxFlopsPerHead = 1e11;
// Query rows the fp64 oracle checks when naive did not run (the oracle is slow on long rows).
constexpr std::int64_t kSliceRows = 16;

// Largest |difference| two fp32-accumulating paths may show after rounding to the output dtype.
double tolerance(DType dtype) {
  switch (dtype) {
    case DType::f16:
      return 2e-3;
    case DType::bf16:
      return 1.6e-2;
    default:
      return 1e-4;
  }
}

struct Inputs {
  HostArray q, k, v;
};

Inputs random_inputs(const BenchConfig& c) {
  const std::vector<std::int64_t> shape{c.batch, c.seqlen, c.heads, c.head_dim};
  Inputs in{HostArray(c.dtype, shape), HostArray(c.dtype, shape), HostArray(c.dtype, shape)};
  std::mt19937 rng(std::uint32_t(c.seqlen * 7919 + c.head_dim));
  in.q.fill_random(rng);
  in.k.fill_random(rng);
  in.v.fill_random(rng);
  return in;
}

AttentionArgs make_args(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        bool causal, Algo algo) {
  AttentionArgs args;
  args.q = q;
  args.k = k;
  args.v = v;
  args.out = out;
  args.mask.causal = causal;  // bottom-right aligned, which the oracle slice relies on
  args.algo = algo;
  return args;
}

// The oracle on the last `rows` queries against all keys. With bottom-right causal alignment a
// query sees the same keys in the slice as in the full problem, so the rows compare one to one.
double diff_vs_reference(const Inputs& in, const HostArray& out, const BenchConfig& c) {
  const std::int64_t rows = std::min(kSliceRows, c.seqlen), first = c.seqlen - rows;
  const std::int64_t hd = c.heads * c.head_dim;
  const Tensor q = in.q.view();
  const Tensor q_rows(q.data_as<std::uint8_t>() + std::size_t(first * hd) * dtype_size(c.dtype),
                      c.dtype, {c.batch, rows, c.heads, c.head_dim},
                      {q.stride(0), q.stride(1), q.stride(2), 1});
  HostArray expected(c.dtype, {c.batch, rows, c.heads, c.head_dim});
  attention_forward(
      make_args(q_rows, in.k.view(), in.v.view(), expected.view(), c.causal, Algo::reference));
  double worst = 0.0;
  for (std::int64_t b = 0; b < c.batch; ++b) {
    for (std::int64_t i = 0; i < rows * hd; ++i) {
      const double diff =
          std::fabs(out.at((b * c.seqlen + first) * hd + i) - expected.at((b * rows) * hd + i));
      if (std::isnan(diff)) return diff;
      worst = std::max(worst, diff);
    }
  }
  return worst;
}

class Sweep {
 public:
  Sweep(const BenchOptions& o, BenchDevice& device) : opts_(o), device_(device) {}

  BenchRow run(const BenchConfig& c, bool flash_only) {
    BenchRow row{c, {}};
    for (const Algo algo : lineage_algos()) row.runs.push_back(plan(algo, c, flash_only));
    if (std::none_of(row.runs.begin(), row.runs.end(), runs)) return row;  // e.g. naive, too big
    const Inputs in = random_inputs(c);
    const auto q = device_.upload(in.q), k = device_.upload(in.k), v = device_.upload(in.v);
    std::vector<Runner> runners;
    for (Measurement& m : row.runs) {
      if (runs(m)) runners.push_back({m, c, *q, *k, *v, nullptr, 0.0});
    }
    for (Runner& r : runners) warm_up(r);
    check(in, runners);
    for (Runner& r : runners) time(r);
    progress_.clear();
    return row;
  }

 private:
  // One measurement in progress: its output stays on the device between the runs.
  struct Runner {
    Measurement& m;
    const BenchConfig& config;
    const DeviceArray &q, &k, &v;
    std::unique_ptr<DeviceArray> out;
    double warm_ms = 0.0;
  };

  static bool runs(const Measurement& m) { return m.requested && m.skipped.empty(); }

  Measurement plan(Algo algo, const BenchConfig& c, bool flash_only) const {
    Measurement m;
    m.algo = algo;
    m.requested = std::count(opts_.algos.begin(), opts_.algos.end(), algo) > 0;
    const core::AttentionSize size = c.size();
    const double elem = double(dtype_size(c.dtype));
    if (algo == Algo::fa1) {
      if (core::forward_flops(size) / double(c.batch * c.heads) > kFa1MaxFlopsPerHead) {
        m.skipped = "> 1e11 FLOP/head";
      } else if (device_.is_cpu()) {
        m.skipped = "CUDA only";  // the CPU backend has no FA1 kernel
      }
    }
    if (algo == Algo::naive) {
      // S and P in fp32, whatever the input dtype.
      m.bytes_modelled = core::naive_forward_bytes(size, elem, sizeof(float));
      // Its workspace plus its fp32 copies of the inputs and both algorithms' tensors.
      const double need = core::naive_workspace_bytes(size, sizeof(float)) +
                          core::flash_forward_bytes(size, sizeof(float)) +
                          2 * core::flash_forward_bytes(size, elem);
      if (need > kMemoryShare * device_.memory_bytes()) {
        m.skipped = "needs " + human_bytes(need);
      } else if (flash_only) {
        m.skipped = "flash-only row";
      }
    } else if (algo == Algo::fa1) {
      m.bytes_modelled = core::fa1_forward_bytes(size, elem);
    } else {
      m.bytes_modelled = core::flash_forward_bytes(size, elem);
    }
    return m;
  }

  std::string label(const Runner& r) const {
    return format("N=%lld %s", static_cast<long long>(r.config.seqlen), algo_label(r.m.algo));
  }

  double run_once(Runner& r) {
    const AttentionArgs args =
        make_args(r.q.view(), r.k.view(), r.v.view(), r.out->view(), r.config.causal, r.m.algo);
    return device_.time_ms([&] { attention_forward(args); });
  }

  // The first run: page faults, thread start-up and the output the check compares.
  void warm_up(Runner& r) {
    const BenchConfig& c = r.config;
    HostArray poisoned(c.dtype, {c.batch, c.seqlen, c.heads, c.head_dim});
    poisoned.poison();  // an element the algorithm never writes fails the check
    r.out = device_.upload(poisoned);
    if (core::forward_flops(c.size()) > kLongRunFlops) progress_.show(label(r) + " warm-up...");
    r.warm_ms = run_once(r);
  }

  void time(Runner& r) {
    const int repeats = opts_.repeats > 0 ? opts_.repeats
                                          : std::clamp(int(kMeasureMs / std::max(r.warm_ms, 1e-3)),
                                                       kMinRepeats, kMaxRepeats);
    std::vector<double> ms;
    for (int i = 0; i < repeats; ++i) {
      if (r.warm_ms > kLongRunMs) progress_.show(label(r) + format(" %d/%d...", i + 1, repeats));
      ms.push_back(run_once(r));
    }
    r.m.repeats = repeats;
    r.m.ms = median(ms);
    r.m.gflops = core::forward_flops(r.config.size()) / (r.m.ms * 1e6);
  }

  // Every algorithm against naive when naive ran beside it; otherwise each that ran against the
  // oracle on a slice.
  void check(const Inputs& in, std::vector<Runner>& runners) {
    progress_.clear();  // a failure message must not land on a progress line
    const Runner* naive =
        !runners.empty() && runners.front().m.algo == Algo::naive ? &runners.front() : nullptr;
    if (naive != nullptr && runners.size() > 1) {
      const HostArray baseline = device_.download(*naive->out);
      for (Runner& r : runners) {
        if (&r == naive) continue;
        r.m.checked_against = "naive";
        r.m.max_abs_diff = max_abs_diff(baseline, device_.download(*r.out));
        expect_close(r.config, r.m);
      }
      return;
    }
    for (Runner& r : runners) {
      r.m.checked_against = "reference";
      r.m.max_abs_diff = diff_vs_reference(in, device_.download(*r.out), r.config);
      expect_close(r.config, r.m);
    }
  }

  static void expect_close(const BenchConfig& c, const Measurement& m) {
    const double tol = tolerance(c.dtype);
    if (m.max_abs_diff <= tol) return;  // false for NaN too
    throw std::runtime_error(
        format("N=%lld: the %s output differs from %s by %.3g (tolerance %.3g); no timing reported",
               static_cast<long long>(c.seqlen), algo_label(m.algo), m.checked_against.c_str(),
               m.max_abs_diff, tol));
  }

  const BenchOptions& opts_;
  BenchDevice& device_;
  Progress progress_;
};

}  // namespace

int run_bench(const BenchOptions& o) {
  const auto device = make_bench_device(o.device);
  std::ofstream json;  // opened first: a bad path fails now, not after minutes of measuring
  if (!o.json_path.empty()) {
    json.open(o.json_path);
    if (!json) throw std::runtime_error("--json " + o.json_path + ": cannot open for writing");
  }
  BenchReport report;
  report.device = device->name();
  report.requested = o.algos;
  if (device->is_cpu()) report.sgemm = measure_sgemm();
  report.sgemm_absent =
      device->is_cpu() ? "built without OpenBLAS" : "the CPU yardstick, not for a GPU";
  const BenchConfig sweep{o.dtype, o.head_dim, 0, o.batch, o.heads, o.causal};
  print_bench_header(report, sweep, o.repeats);

  Sweep runner(o, *device);
  const auto add = [&](BenchConfig c, bool flash_only) {
    report.rows.push_back(runner.run(c, flash_only));
    print_bench_row(report, report.rows.back(), sweep);
  };
  for (const std::int64_t n : o.seqlens.empty() ? kDefaultSeqlens : o.seqlens) {
    BenchConfig c = sweep;
    c.seqlen = n;
    add(c, false);
  }
  if (o.seqlens.empty()) {  // the lesson's long sequence: one head, one sequence
    add({o.dtype, o.head_dim, kLargeSeqlen, 1, 1, o.causal}, true);
  }
  if (!o.json_path.empty()) {
    write_bench_json(report, json);
    if (!json.flush()) throw std::runtime_error("--json " + o.json_path + ": writing failed");
  }
  return 0;
}

}  // namespace flashkit::app
