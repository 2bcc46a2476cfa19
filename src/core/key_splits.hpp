// How many parts to cut each task's keys into when the tasks alone would leave processors idle:
// the paged decode's split plan (core/paged_dispatch.cpp) and the CUDA fp32 forward's key splits
// (cuda/fwd_fp32.cu), each part writing a partial (o, lse) state that a merge combines.
#pragma once

#include <algorithm>
#include <cstdint>

namespace flashkit::core {

// Tasks per processor to aim for: with two waves a task that runs long is absorbed by the rest.
constexpr std::int64_t kSplitWaves = 2;

// 1 when `tasks` already fill `processors` kSplitWaves times over (or there are none); otherwise
// enough parts for that, as far as each keeps `min_keys` of the `keys` and there are at most
// `max_splits`.
inline std::int64_t key_splits(std::int64_t tasks, std::int64_t processors, std::int64_t keys,
                               std::int64_t min_keys, std::int64_t max_splits) {
  if (tasks <= 0 || tasks >= kSplitWaves * processors) return 1;
  const std::int64_t want = (kSplitWaves * processors + tasks - 1) / tasks;
  return std::max<std::int64_t>(1, std::min({want, keys / min_keys, max_splits}));
}

// Parts per task for the paged decode kernels, whose CTAs (one task part each) run in one wave
// of up to `slots` per processor: as many parts as keep tasks * parts <= slots * processors, so
// that no processor holds more CTAs than the wave's. (kSplitWaves' ceiling gave 64 tasks on 132
// SMs 5 parts, 320 CTAs where 264 fit: e4m3 decode at batch 8 / 8k read 57.9 us against 45.0
// with 4 parts in one run; H200, docs/kernels/decode.md v3.8.) At least 1, capped by the keys
// each part must keep and by the most parts.
inline std::int64_t one_wave_key_splits(std::int64_t tasks, std::int64_t processors,
                                        std::int64_t slots, std::int64_t keys,
                                        std::int64_t min_keys, std::int64_t max_splits) {
  if (tasks <= 0) return 1;
  const std::int64_t fill = slots * processors / tasks;
  return std::max<std::int64_t>(1, std::min({fill, keys / min_keys, max_splits}));
}

}  // namespace flashkit::core
