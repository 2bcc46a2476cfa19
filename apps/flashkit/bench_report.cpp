// The lineage bench's console table and JSON file.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench.hpp"
#include "flashkit/info.hpp"
#include "format.hpp"
#include "json_writer.hpp"

namespace flashkit::app {

namespace {

// A column of the table: its heading, width and cell.
struct Column {
  std::string heading;
  int width;
  std::function<std::string(const BenchReport&, const BenchRow&)> cell;
};

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

const Measurement& of(const BenchRow& row, Algo algo) {
  for (const Measurement& m : row.runs) {
    if (m.algo == algo) return m;
  }
  throw std::logic_error("a bench row without every lineage algorithm");
}

std::string speedup_cell(const Measurement& naive, const Measurement& m) {
  if (!ran(naive) || !ran(m)) return "-";
  const double x = naive.ms / m.ms;
  return format(x >= 0.1 ? "%.2fx" : "%.2gx", x);  // FA1 against naive: 0.0016x, not 0.00x
}

// The check of the last checked algorithm (flash's, when it ran).
std::string check_cell(const BenchRow& row) {
  const Measurement* shown = nullptr;
  for (const Measurement& m : row.runs) {
    if (!m.checked_against.empty()) shown = &m;
  }
  if (shown == nullptr) return "-";
  return format("%.1e vs %s", shown->max_abs_diff, shown->checked_against.c_str());
}

// The table: N; ms, speedup over naive, modelled traffic and GFLOP/s of each shown algorithm;
// flash's share of sgemm; the largest difference of the row's check.
std::vector<Column> table_columns(const std::vector<Algo>& requested) {
  std::vector<Algo> shown;
  for (const Algo a : lineage_algos()) {
    const bool named = std::find(requested.begin(), requested.end(), a) != requested.end();
    if (a != Algo::fa1 || named) shown.push_back(a);  // naive and flash always
  }
  std::vector<Column> cols;
  cols.push_back({"N", 8, nullptr});  // filled by print_bench_row (it knows the sweep)
  for (const Algo a : shown) {
    cols.push_back({std::string(algo_label(a)) + " ms", 13,
                    [a](const BenchReport&, const BenchRow& r) { return ms_cell(of(r, a)); }});
  }
  for (const Algo a : shown) {
    if (a == Algo::naive) continue;
    const std::string heading =
        shown.size() > 2 ? std::string(algo_label(a)) + " speedup" : "speedup";
    cols.push_back({heading, int(heading.size()), [a](const BenchReport&, const BenchRow& r) {
                      return speedup_cell(r.naive(), of(r, a));
                    }});
  }
  for (const Algo a : shown) {
    cols.push_back(
        {std::string(algo_label(a)) + " traffic", 13, [a](const BenchReport&, const BenchRow& r) {
           return human_bytes(of(r, a).bytes_modelled);
         }});
  }
  cols.push_back({"ratio", 7, [](const BenchReport&, const BenchRow& r) {
                    return format("%.0fx", r.naive().bytes_modelled / r.flash().bytes_modelled);
                  }});
  for (const Algo a : shown) {
    cols.push_back({std::string(algo_label(a)) + " GFLOP/s", 13,
                    [a](const BenchReport&, const BenchRow& r) { return gflops_cell(of(r, a)); }});
  }
  cols.push_back({"flash/sgemm", 11, [](const BenchReport& report, const BenchRow& r) {
                    return ran(r.flash()) && report.sgemm
                               ? format("%.1f%%", 100.0 * r.flash().gflops / report.sgemm->gflops)
                               : std::string("-");
                  }});
  cols.push_back(
      {"max|diff|", 19, [](const BenchReport&, const BenchRow& r) { return check_cell(r); }});
  return cols;
}

void print_cells(const std::vector<Column>& cols, const std::vector<std::string>& cells) {
  std::string line;
  for (std::size_t i = 0; i < cells.size(); ++i) {
    line += format("%*s ", std::max(cols[i].width, int(cols[i].heading.size())), cells[i].c_str());
  }
  while (!line.empty() && line.back() == ' ') line.pop_back();
  std::printf("%s\n", line.c_str());
}

void write_row(JsonWriter& j, const BenchRow& row, const Measurement& m) {
  const BenchConfig& c = row.config;
  j.begin_object();
  j.key("impl").value(std::string("flashkit-") + algo_name(m.algo));
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
    if (!m.checked_against.empty()) {
      j.key("max_abs_diff").value(m.max_abs_diff);
      j.key("checked_against").value(m.checked_against);
    }
  }
  j.key("bytes_modelled").value(m.bytes_modelled);
  j.end_object();
}

}  // namespace

void print_bench_header(const BenchReport& report, const BenchConfig& sweep, int repeats) {
  std::printf("flashkit %s lineage bench on %s\n", version(), report.device.c_str());
  std::printf(
      "d=%lld %s batch=%lld heads=%lld %s; naive = S and P materialised (fp32), fa1 = KV blocks "
      "outer, state through memory, flash = fa2, tiled online softmax\n",
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
  const std::vector<Column> cols = table_columns(report.requested);
  std::vector<std::string> headings;
  for (const Column& c : cols) headings.push_back(c.heading);
  print_cells(cols, headings);
  std::fflush(stdout);
}

void print_bench_row(const BenchReport& report, const BenchRow& row, const BenchConfig& sweep) {
  std::vector<std::string> cells{format("%lld%s", static_cast<long long>(row.config.seqlen),
                                        differs(row.config, sweep) ? "*" : "")};
  const std::vector<Column> cols = table_columns(report.requested);
  for (std::size_t i = 1; i < cols.size(); ++i) cells.push_back(cols[i].cell(report, row));
  print_cells(cols, cells);
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
    for (const Measurement& m : row.runs) {
      if (m.requested) write_row(j, row, m);
    }
  }
  j.end_array();
  j.end_object();
}

}  // namespace flashkit::app
