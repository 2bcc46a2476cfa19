// serve-sim's server: a decode loop over a paged KV cache (BlockAllocator) with prefix reuse
// (RadixCache), driven by one workload. Time advances in decode steps; each step admits waiting
// requests while memory allows, decodes one token for every running request and retires the
// finished ones into the prefix cache.
#pragma once

#include <cstdint>

#include "serve_sim_workload.hpp"

namespace flashkit::app {

struct SimConfig {
  std::int64_t pages = 16384;
  std::int64_t page_size = 16;
  std::int64_t requests = 2000;
  std::int64_t max_batch = 64;  // requests decoding at once
  std::uint64_t seed = 1;
};

struct SimResult {
  std::int64_t requests = 0;        // finished
  std::int64_t rejected = 0;        // longer than the whole pool: never admitted
  std::int64_t prompt_tokens = 0;   // of finished requests
  std::int64_t matched_tokens = 0;  // of those, found in the prefix cache: prefill saved
  std::int64_t decode_tokens = 0;
  std::int64_t steps = 0;  // decode steps in which something ran
  // Tokens held by used pages / (used pages * page_size), summed over steps: what paging with
  // prefix sharing leaves unused inside pages.
  double utilisation = 0;
  std::int64_t evicted_pages = 0;
  double pages_mean = 0;  // used pages, over steps
  std::int64_t pages_peak = 0;
  std::int64_t pages_end = 0;  // held by the prefix cache once every request is done
  // The decode batch, averaged over steps: requests running, their tokens found in the prefix
  // cache, and their own tokens (the decode step serve-sim times on a GPU).
  double batch_mean = 0, matched_mean = 0, own_mean = 0;

  double hit_rate() const {
    return prompt_tokens == 0 ? 0.0 : double(matched_tokens) / double(prompt_tokens);
  }
};

SimResult simulate(const WorkloadSpec& spec, const SimConfig& config);

}  // namespace flashkit::app
