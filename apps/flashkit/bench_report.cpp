// The lineage bench's console table and JSON file.
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

#include "bench.hpp"
#include "flashkit/info.hpp"
#include "format.hpp"
#include "json_writer.hpp"

namespace flashkit::app {

namespace {

const char* kColumns = "%8s %14s %10s %8s %13s %13s %7s %13s %13s %11s %9s %s\n";

std::string ms_cell(const Measurement& m) {
  if (!m.requested) return "-";
  if (!m.skipped.empty()) return m.skipped;
  return format("%.3f", m.ms);
}

std::string gflops_cell(const Measurement& m) {
  if (!m.requested || !m.skipped.empty()) return "-";
  return format("%.1f", m.gflops);
}

bool ran(const Measurement& m) {
  return m.requested && m.skipped.empty();
}

// Rows whose batch and heads differ from the sweep's (the long flash-only row) are starred.
bool differs(const BenchConfig& a, const BenchConfig& b) {
  return a.batch != b.batch || a.heads != b.heads;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

void write_row(JsonWriter& j, const BenchRow& row, const Measurement& m) {
  const BenchConfig& c = row.config;
  j.begin_object();
  j.key("impl").value(m.algo == Algo::naive ? "flashkit-naive" : "flashkit-fa2");
  j.key("config").begin_object();
  j.key("dtype").value(dtype_name(c.dtype));
  j.key("d").value(c.head_dim);
  j.key("n").value(c.seqlen);
  j.key("causal").value(c.causal);
  j.key("batch").value(c.batch);
  j.key("heads").value(c.heads);
  j.end_object();
  if (!m.skipped.empty()) {
    j.key("skipped").value(m.skipped);
  } else {
    j.key("ms").value(m.ms);
    j.key("gflops").value(m.gflops);
    j.key("repeats").value(std::int64_t(m.repeats));
    j.key("max_abs_diff").value(row.max_abs_diff);
    j.key("checked_against").value(row.checked_against);
  }
  j.key("bytes_modelled").value(m.bytes_modelled);
  j.end_object();
}

}  // namespace

void print_bench_header(const BenchReport& report, const BenchConfig& sweep, int repeats) {
  std::printf("flashkit %s lineage bench on %s\n", version(), report.device.c_str());
  std::printf(
      "d=%lld %s batch=%lld heads=%lld %s; naive = S and P materialised (fp32), "
      "flash = fa2, tiled online softmax\n",
      static_cast<long long>(sweep.head_dim), dtype_name(sweep.dtype),
      static_cast<long long>(sweep.batch), static_cast<long long>(sweep.heads),
      sweep.causal ? "causal" : "non-causal");
  if (report.sgemm) {
    std::printf("sgemm 2048^3: %.1f GFLOP/s (%s)\n", report.sgemm->gflops,
                report.sgemm->library.c_str());
    if (!report.sgemm->warning.empty()) {
      std::printf("  warning: %s\n", report.sgemm->warning.c_str());
    }
  } else {
    std::printf("sgemm: not measured (%s)\n", report.sgemm_absent.c_str());
  }
  if (repeats > 0) {
    std::printf("time: warm-up, then the median of %d run%s; ", repeats, repeats == 1 ? "" : "s");
  } else {
    std::printf("time: warm-up, then the median of 3-20 runs (about 4 s each); ");
  }
  std::printf("traffic: the cost model's bytes, not measured\n\n");
  std::printf(kColumns, "N", "naive ms", "flash ms", "speedup", "naive traffic", "flash traffic",
              "ratio", "naive GFLOP/s", "flash GFLOP/s", "flash/sgemm", "max|diff|", "");
  std::fflush(stdout);
}

void print_bench_row(const BenchReport& report, const BenchRow& row, const BenchConfig& sweep) {
  const Measurement &naive = row.naive, &flash = row.flash;
  const bool both = ran(naive) && ran(flash);
  const std::string n = format("%lld%s", static_cast<long long>(row.config.seqlen),
                               differs(row.config, sweep) ? "*" : "");
  const std::string sgemm_share =
      ran(flash) && report.sgemm ? format("%.1f%%", 100.0 * flash.gflops / report.sgemm->gflops)
                                 : "-";
  const bool checked = !row.checked_against.empty();
  std::printf(kColumns, n.c_str(), ms_cell(naive).c_str(), ms_cell(flash).c_str(),
              both ? format("%.2fx", naive.ms / flash.ms).c_str() : "-",
              human_bytes(naive.bytes_modelled).c_str(), human_bytes(flash.bytes_modelled).c_str(),
              format("%.0fx", naive.bytes_modelled / flash.bytes_modelled).c_str(),
              gflops_cell(naive).c_str(), gflops_cell(flash).c_str(), sgemm_share.c_str(),
              checked ? format("%.1e", row.max_abs_diff).c_str() : "-",
              checked ? ("vs " + row.checked_against).c_str() : "");
  if (differs(row.config, sweep)) {
    std::printf("%8s batch=%lld heads=%lld\n", "*", static_cast<long long>(row.config.batch),
                static_cast<long long>(row.config.heads));
  }
  std::fflush(stdout);
}

void write_bench_json(const BenchReport& report, std::ostream& file) {
  const char* commit = std::getenv("FLASHKIT_COMMIT");
  const BuildInfo build = build_info();
  JsonWriter j(file);
  j.begin_object();
  j.key("suite").value("lineage");
  j.key("commit").value(commit && *commit ? commit : "unknown");
  j.key("date").value(utc_now());
  j.key("device").value(report.device);
  j.key("versions").begin_object();
  j.key("flashkit").value(version());
  j.key("compiler").value(build.compiler);
  j.key("cpu_isa").value(build.cpu_isa);
  if (report.sgemm) j.key("sgemm").value(report.sgemm->library);
  j.end_object();
  j.key("ceilings").begin_object();
  j.key("sgemm_gflops")
      .value(report.sgemm ? std::optional<double>(report.sgemm->gflops) : std::nullopt);
  j.end_object();
  j.key("rows").begin_array();
  for (const BenchRow& row : report.rows) {
    for (const Measurement* m : {&row.naive, &row.flash}) {
      if (m->requested) write_row(j, row, *m);
    }
  }
  j.end_array();
  j.end_object();
}

}  // namespace flashkit::app
