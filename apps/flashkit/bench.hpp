// The lineage bench's results, shared by the sweep (bench.cpp) and its reports (bench_report.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "core/cost_model.hpp"
#include "flashkit/attention.hpp"
#include "sgemm.hpp"

namespace flashkit::app {

struct BenchConfig {
  DType dtype;
  std::int64_t head_dim, seqlen, batch, heads;
  bool causal;

  core::AttentionSize size() const { return {batch, heads, seqlen, seqlen, head_dim, causal}; }
};

// One algorithm at one config.
struct Measurement {
  Algo algo;
  bool requested = true;  // named by --algo
  std::string skipped;    // non-empty: not run, and why ("needs 32.0 GiB")
  double ms = 0.0;        // median
  double gflops = 0.0;
  double bytes_modelled = 0.0;  // the cost model's memory traffic
  int repeats = 0;
  double max_abs_diff = 0.0;
  std::string checked_against;  // "naive" or "reference" (a slice of rows, fp64 oracle); empty
                                // for naive when the others were checked against it
};

// The algorithms of the lineage, in the table's order: naive first (the baseline of the
// speedups and of the checks), flash (fa2) last.
inline const std::vector<Algo>& lineage_algos() {
  static const std::vector<Algo> algos{Algo::naive, Algo::fa1, Algo::fa2};
  return algos;
}

// The table's name of an algorithm: "naive", "fa1", and "flash" for fa2.
inline const char* algo_label(Algo algo) {
  return algo == Algo::fa2 ? "flash" : algo_name(algo);
}

struct BenchRow {
  BenchConfig config;
  std::vector<Measurement> runs;  // one per lineage_algos(), requested or not

  const Measurement& naive() const { return runs.front(); }
  const Measurement& flash() const { return runs.back(); }
};

struct BenchReport {
  std::string device;
  std::optional<SgemmRate> sgemm;
  std::string sgemm_absent;     // why sgemm was not measured
  std::vector<Algo> requested;  // --algo
  std::vector<BenchRow> rows;
};

// The console table, streamed one row at a time; its columns are those of the requested
// algorithms (naive and flash always).
void print_bench_header(const BenchReport& report, const BenchConfig& sweep, int repeats);
void print_bench_row(const BenchReport& report, const BenchRow& row, const BenchConfig& sweep);
// BENCH.md's schema, suite "lineage".
void write_bench_json(const BenchReport& report, std::ostream& file);

}  // namespace flashkit::app
