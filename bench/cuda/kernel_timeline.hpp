// Where a CUDA graph's time goes, kernel by kernel: CUPTI's kernel activity records (GPU start
// and end of every kernel, those of graph replays included, without serialising them) over
// `replays` launches of each graph, grouped into replays and summarised per kernel position as
// medians: its start after the replay's first kernel started (and that start's range), its
// duration, and the gap since the kernel before it ended (negative where two overlap on
// different streams).
// Built where CMake finds CUPTI (FLASHKIT_BENCH_CUPTI); elsewhere `available()` is false.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#ifdef FLASHKIT_BENCH_CUPTI
#include <cupti.h>
#include <cxxabi.h>
#endif

namespace flashkit::bench {

struct KernelSpan {
  std::string name;
  std::uint64_t start_ns, end_ns;
};

struct TimelineStep {
  std::string name;                      // the kernel's name without namespaces (short_name)
  double start_us, duration_us, gap_us;  // medians over the replays
  double start_min_us, start_max_us;     // the start's range over the replays
};

struct Timeline {
  std::vector<TimelineStep> steps;
  double span_us = 0;  // median of (last end - first start) per replay
};

namespace timeline_detail {

inline std::vector<KernelSpan>& spans() {
  static std::vector<KernelSpan> s;
  return s;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

#ifdef FLASHKIT_BENCH_CUPTI
inline void cupti_check(CUptiResult r, const char* what) {
  if (r != CUPTI_SUCCESS) {
    const char* msg = nullptr;
    cuptiGetResultString(r, &msg);
    throw std::runtime_error(std::string(what) + ": " + (msg ? msg : "CUPTI error"));
  }
}

// "void ns::kernel<ns::A, 2, true>(P)" -> "kernel<A, 2, true>", at most 100 characters.
inline std::string short_name(const char* mangled) {
  int status = 0;
  char* full = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string s = status == 0 && full ? full : mangled;
  std::free(full);
  const std::size_t params = s.rfind('(');
  if (params != std::string::npos) s.erase(params);
  if (s.rfind("void ", 0) == 0) s.erase(0, 5);
  for (const char* ns : {"flashkit::cuda::sm90::", "flashkit::cuda::sm80::",
                         "flashkit::cuda::decode::", "flashkit::cuda::", "flashkit::"}) {
    for (std::size_t at; (at = s.find(ns)) != std::string::npos;) s.erase(at, std::strlen(ns));
  }
  return s.size() > 100 ? s.substr(0, 100) : s;
}

inline void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  constexpr size_t kBytes = 8 << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBytes));
  *size = kBytes;
  *max_records = 0;
}

inline void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ||
        record->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      spans().push_back({short_name(k->name), k->start, k->end});
    }
  }
  std::free(buffer);
}
#endif

}  // namespace timeline_detail

inline bool timeline_available() {
#ifdef FLASHKIT_BENCH_CUPTI
  return true;
#else
  return false;
#endif
}

// Replays graphs[i % size] `replays` times on `stream` (after 5 unrecorded replays) and
// summarises their kernels. Every replay must run the same kernels.
inline Timeline graph_timeline(const std::vector<cudaGraphExec_t>& graphs, cudaStream_t stream,
                               int replays) {
#ifdef FLASHKIT_BENCH_CUPTI
  using namespace timeline_detail;
  auto replay = [&](int i) {
    if (cudaGraphLaunch(graphs[std::size_t(i) % graphs.size()], stream) != cudaSuccess)
      throw std::runtime_error("timeline: graph launch");
  };
  for (int i = 0; i < 5; ++i) replay(i);
  if (cudaStreamSynchronize(stream) != cudaSuccess)
    throw std::runtime_error("timeline: warm-up replays");
  spans().clear();
  cupti_check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed),
              "cuptiActivityRegisterCallbacks");
  cupti_check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityEnable");
  for (int i = 0; i < replays; ++i) replay(i);
  if (cudaStreamSynchronize(stream) != cudaSuccess) throw std::runtime_error("timeline: replays");
  cupti_check(cuptiActivityFlushAll(1), "cuptiActivityFlushAll");
  cupti_check(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityDisable");

  std::vector<KernelSpan> all = spans();
  std::sort(all.begin(), all.end(),
            [](const KernelSpan& a, const KernelSpan& b) { return a.start_ns < b.start_ns; });
  if (all.empty() || all.size() % std::size_t(replays) != 0)
    throw std::runtime_error("timeline: " + std::to_string(all.size()) + " kernels over " +
                             std::to_string(replays) + " replays");
  const std::size_t per = all.size() / std::size_t(replays);
  // A replay's kernels in start order, each known by its name and its count among the replay's
  // kernels of that name (where two streams overlap, their order can change between replays).
  auto keyed = [&](std::size_t r) {
    std::vector<std::pair<std::string, const KernelSpan*>> out;
    for (std::size_t i = 0; i < per; ++i) {
      const KernelSpan& k = all[r * per + i];
      int seen = 0;
      for (const auto& o : out) seen += o.second->name == k.name;
      out.emplace_back(k.name + "#" + std::to_string(seen), &k);
    }
    return out;
  };
  const auto order = keyed(0);
  Timeline t;
  std::vector<double> spans_us;
  std::vector<std::vector<double>> start(per), duration(per), gap(per);
  for (std::size_t r = 0; r < std::size_t(replays); ++r) {
    const auto ks = keyed(r);
    const std::uint64_t first = ks[0].second->start_ns;
    std::uint64_t last_end = first;
    for (const auto& k : ks) last_end = std::max(last_end, k.second->end_ns);
    for (std::size_t i = 0; i < per; ++i) {
      const auto at = std::find_if(ks.begin(), ks.end(),
                                   [&](const auto& k) { return k.first == order[i].first; });
      if (at == ks.end()) throw std::runtime_error("timeline: replays ran different kernels");
      const KernelSpan& k = *at->second;
      start[i].push_back((double(k.start_ns) - double(first)) * 1e-3);
      duration[i].push_back((double(k.end_ns) - double(k.start_ns)) * 1e-3);
      // The gap since the kernel before it in the first replay's order ended.
      const KernelSpan& before =
          i ? *std::find_if(ks.begin(), ks.end(),
                            [&](const auto& o) { return o.first == order[i - 1].first; })
                   ->second
            : k;
      gap[i].push_back(i ? (double(k.start_ns) - double(before.end_ns)) * 1e-3 : 0.0);
    }
    spans_us.push_back((double(last_end) - double(first)) * 1e-3);
  }
  for (std::size_t i = 0; i < per; ++i) {
    const auto [lo, hi] = std::minmax_element(start[i].begin(), start[i].end());
    t.steps.push_back(
        {order[i].second->name, median(start[i]), median(duration[i]), median(gap[i]), *lo, *hi});
  }
  t.span_us = median(spans_us);
  return t;
#else
  (void)graphs, (void)stream, (void)replays;
  throw std::runtime_error("timeline: built without CUPTI");
#endif
}

// The kernels of a timeline as a JSON array (start, its range, duration and gap, us).
inline std::string timeline_kernels_json(const Timeline& t) {
  std::ostringstream f;
  f << "[";
  for (std::size_t k = 0; k < t.steps.size(); ++k) {
    const TimelineStep& s = t.steps[k];
    f << (k ? ", " : "") << "{\"kernel\": \"" << s.name << "\", \"start_us\": " << s.start_us
      << ", \"start_min_us\": " << s.start_min_us << ", \"start_max_us\": " << s.start_max_us
      << ", \"duration_us\": " << s.duration_us << ", \"gap_us\": " << s.gap_us << "}";
  }
  f << "]";
  return f.str();
}

// The kernels of a timeline on stdout, one line each.
inline void print_timeline_kernels(const Timeline& t) {
  for (const TimelineStep& s : t.steps) {
    std::printf("  start %7.1f (%5.1f-%5.1f)  duration %7.1f  gap %6.1f us  %s\n", s.start_us,
                s.start_min_us, s.start_max_us, s.duration_us, s.gap_us, s.name.c_str());
  }
}

}  // namespace flashkit::bench
