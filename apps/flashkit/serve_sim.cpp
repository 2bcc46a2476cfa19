// `flashkit serve-sim`: runs the serving simulator on each requested workload and reports prefix
// reuse and memory use as a table, and optionally as JSON. With a GPU it also times the average
// decode step with plain paged decode and with cascade attention (tokens per second).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <stdexcept>

#include "commands.hpp"
#include "format.hpp"
#include "json_writer.hpp"
#include "serve_sim_engine.hpp"
#include "serve_sim_gpu.hpp"

namespace flashkit::app {
namespace {

using ll = long long;

struct Row {
  WorkloadSpec spec;
  SimResult result;
  DecodeStepTiming gpu;  // measured only with a GPU
};

// The decode step the simulation ran on average, as one batch sharing its matched prefix (a
// simplification: requests matching different cached prefixes would run one cascade per group).
DecodeStepShape step_shape(const SimResult& r) {
  DecodeStepShape s;
  s.batch = std::llround(r.batch_mean);
  s.prefix = std::llround(r.matched_mean);
  s.suffix = std::max<std::int64_t>(1, std::llround(r.own_mean));
  return s;
}

void print_gpu_table(const std::vector<Row>& rows) {
  if (rows.empty() || !rows.front().gpu.measured) return;
  std::printf(
      "\ndecode step on %s (bf16, GQA 32/8, d 128, pages of 16; the batch's matched tokens as one "
      "shared prefix):\n",
      rows.front().gpu.device.c_str());
  std::printf("%-10s %6s %7s %7s %10s %11s %13s %15s %8s\n", "workload", "batch", "prefix",
              "suffix", "paged ms", "cascade ms", "paged tok/s", "cascade tok/s", "speedup");
  for (const Row& row : rows) {
    const DecodeStepTiming& t = row.gpu;
    if (!t.measured) continue;
    std::printf("%-10s %6lld %7lld %7lld %10.4f %11.4f %13.0f %15.0f %7.2fx\n",
                row.spec.name.c_str(), ll(t.shape.batch), ll(t.shape.prefix), ll(t.shape.suffix),
                t.paged_ms, t.cascade_ms, t.paged_tokens_per_s(), t.cascade_tokens_per_s(),
                t.paged_ms / t.cascade_ms);
  }
}

void print_table(const ServeSimOptions& o, const SimConfig& c, const std::vector<Row>& rows) {
  std::printf(
      "flashkit serve-sim: %lld pages x %lld tokens (%lld tokens of KV), radix prefix cache "
      "(LRU), up to %lld requests decoding, seed %llu\n\n",
      ll(c.pages), ll(c.page_size), ll(c.pages * c.page_size), ll(c.max_batch),
      static_cast<unsigned long long>(o.seed));
  std::printf("%-10s %8s %12s %8s %13s %11s %8s %10s %21s\n", "workload", "requests", "prompt tok",
              "hit rate", "prefill saved", "decode tok", "util", "evicted", "pages mean/peak/end");
  for (const Row& row : rows) {
    const SimResult& r = row.result;
    std::printf("%-10s %8lld %12lld %7.1f%% %13lld %11lld %7.2f%% %10lld %21s\n",
                row.spec.name.c_str(), ll(r.requests), ll(r.prompt_tokens), 100 * r.hit_rate(),
                ll(r.matched_tokens), ll(r.decode_tokens), 100 * r.utilisation, ll(r.evicted_pages),
                format("%.0f/%lld/%lld", r.pages_mean, ll(r.pages_peak), ll(r.pages_end)).c_str());
  }
  std::printf(
      "\nhit rate = prompt tokens found in the cache / prompt tokens; util = tokens held / "
      "(pages in use x page size), averaged over decode steps; evicted in pages\n"
      "workloads:\n");
  for (const Row& row : rows) {
    std::printf("  %-10s %s\n  %-10s %s\n", row.spec.name.c_str(), row.spec.shape.c_str(), "",
                describe(row.spec).c_str());
    if (row.result.rejected > 0) {
      std::printf("  %-10s rejected, needing more than the whole pool: %lld\n", "",
                  ll(row.result.rejected));
    }
  }
}

void write_range(JsonWriter& j, const char* name, const TokenRange& r) {
  j.key(name).begin_array();
  j.value(r.lo);
  j.value(r.hi);
  j.end_array();
}

void write_json(const std::string& path, const ServeSimOptions& o, const SimConfig& c,
                const std::vector<Row>& rows) {
  std::ofstream out(path);
  if (!out) throw std::runtime_error("--json: cannot write '" + path + "'");
  JsonWriter j(out);
  j.begin_object();
  j.key("suite").value("serve-sim");
  j.key("config").begin_object();
  j.key("pages").value(c.pages);
  j.key("page_size").value(c.page_size);
  j.key("requests").value(c.requests);
  j.key("max_batch").value(c.max_batch);
  j.key("seed").value(std::int64_t(o.seed));
  j.key("policy").value("lru");
  j.end_object();
  j.key("workloads").begin_array();
  for (const Row& row : rows) {
    const WorkloadSpec& s = row.spec;
    const SimResult& r = row.result;
    j.begin_object();
    j.key("name").value(s.name);
    j.key("parameters").begin_object();
    j.key("shape").value(s.shape);
    j.key("prefixes").value(s.prefixes);
    write_range(j, "prefix_tokens", s.prefix);
    j.key("zipf").value(s.zipf);
    write_range(j, "first_tokens", s.first);
    write_range(j, "turns", s.turns);
    write_range(j, "follow_up_tokens", s.follow_up);
    j.key("repeat").value(s.repeat);
    write_range(j, "output_tokens", s.output);
    write_range(j, "think_steps", s.think);
    j.key("open_sessions").value(s.open_sessions);
    j.end_object();
    j.key("requests").value(r.requests);
    j.key("rejected").value(r.rejected);
    j.key("prompt_tokens").value(r.prompt_tokens);
    j.key("hit_rate").value(r.hit_rate());
    j.key("prefill_saved_tokens").value(r.matched_tokens);
    j.key("decode_tokens").value(r.decode_tokens);
    j.key("steps").value(r.steps);
    j.key("utilisation").value(r.utilisation);
    j.key("evicted_pages").value(r.evicted_pages);
    j.key("pages_in_use").begin_object();
    j.key("mean").value(r.pages_mean);
    j.key("peak").value(r.pages_peak);
    j.key("end").value(r.pages_end);
    j.end_object();
    if (row.gpu.measured) {
      const DecodeStepTiming& t = row.gpu;
      j.key("gpu_decode_step").begin_object();
      j.key("device").value(t.device);
      j.key("batch").value(t.shape.batch);
      j.key("prefix").value(t.shape.prefix);
      j.key("suffix").value(t.shape.suffix);
      j.key("paged_ms").value(t.paged_ms);
      j.key("cascade_ms").value(t.cascade_ms);
      j.key("paged_tokens_per_s").value(t.paged_tokens_per_s());
      j.key("cascade_tokens_per_s").value(t.cascade_tokens_per_s());
      j.end_object();
    }
    j.end_object();
  }
  j.end_array();
  j.end_object();
  if (!out.flush()) throw std::runtime_error("--json: cannot write '" + path + "'");
}

}  // namespace

int run_serve_sim(const ServeSimOptions& options) {
  SimConfig config;
  config.pages = options.pages;
  config.page_size = options.page_size;
  config.requests = options.requests;
  config.seed = options.seed;
  std::vector<Row> rows;
  for (const std::string& name : options.workloads) {
    const WorkloadSpec spec = workload_spec(name);
    const SimResult result = simulate(spec, config);
    // With a GPU: the average decode step, timed with plain paged decode and with cascade.
    rows.push_back(Row{spec, result, time_decode_step(step_shape(result))});
  }
  print_table(options, config, rows);
  print_gpu_table(rows);
  if (!options.json_path.empty()) write_json(options.json_path, options, config, rows);
  return 0;
}

}  // namespace flashkit::app
