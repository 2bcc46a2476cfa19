// A persistent worker pool for the CPU backend. parallel_for hands out indices dynamically (an
// atomic counter), so uneven work such as causal rows balances itself.
#pragma once

#include <cstdint>
#include <functional>

namespace flashkit::cpu {

// Threads the CPU backend uses: FLASHKIT_NUM_THREADS if set, else the hardware's count.
int num_threads();

// Runs body(i) for i in [0, n) on the pool; returns when all are done. The first exception a
// body throws is rethrown here after the others finish.
void parallel_for(std::int64_t n, const std::function<void(std::int64_t)>& body);

}  // namespace flashkit::cpu
