// The subcommands of `flashkit`. Each returns the process exit code; library and runtime failures
// propagate as exceptions, which main turns into "flashkit: error: ..." and exit code 1.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flashkit/attention.hpp"

namespace flashkit::app {

struct BenchOptions {
  std::vector<Algo> algos{Algo::naive, Algo::fa2};
  std::vector<std::int64_t> seqlens;  // empty: the default sweep of the classic lesson
  std::int64_t head_dim = 64;
  std::int64_t heads = 1;
  std::int64_t batch = 1;
  DType dtype = DType::f32;
  bool causal = false;
  int repeats = 0;        // 0: chosen per measurement from the warm-up time
  std::string json_path;  // empty: no file
  std::string device = "auto";
};

// serve-sim: a decode server's KV cache with prefix reuse under synthetic workloads.
struct ServeSimOptions {
  std::vector<std::string> workloads{"chat", "multiturn", "fewshot", "agent"};
  std::int64_t requests = 2000;  // per workload
  std::int64_t pages = 16384;    // 256k tokens at 16 per page: ~32 GiB of Llama-3-8B KV
  std::int64_t page_size = 16;
  std::uint64_t seed = 1;
  std::string json_path;  // empty: no file
};

int run_bench(const BenchOptions& options);
int run_serve_sim(const ServeSimOptions& options);
int run_check();
int run_info();

}  // namespace flashkit::app
