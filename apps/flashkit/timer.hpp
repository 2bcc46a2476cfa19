// Wall-clock timing for the bench: a stopwatch and the median of repeated runs.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace flashkit::app {

class Stopwatch {
 public:
  Stopwatch() : start_(Clock::now()) {}
  double elapsed_ms() const {
    return std::chrono::duration<double, std::milli>(Clock::now() - start_).count();
  }

 private:
  // steady_clock: never jumps with the system time, unlike system_clock.
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_;
};

// The median resists the outliers of a shared machine (a neighbour's build) better than the mean.
inline double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  const auto mid = values.begin() + std::ptrdiff_t(values.size() / 2);
  std::nth_element(values.begin(), mid, values.end());
  if (values.size() % 2 == 1) return *mid;
  return (*mid + *std::max_element(values.begin(), mid)) / 2;
}

}  // namespace flashkit::app
