// Contiguous host memory behind a flashkit::Tensor view: what the commands fill with random
// inputs, hand to attention_forward, and read back to compare.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "flashkit/tensor.hpp"

namespace flashkit::app {

class HostArray {
 public:
  HostArray(DType dtype, std::vector<std::int64_t> shape);

  // Built on each call, so copies and moves of the array never share a stale pointer.
  Tensor view() const;
  DType dtype() const { return dtype_; }
  const std::vector<std::int64_t>& shape() const { return shape_; }
  std::int64_t numel() const { return numel_; }
  void* data() { return storage_.data(); }

  // Uniform in [-1, 1), rounded to the dtype; never all zeros, which would hide wrong indexing.
  void fill_random(std::mt19937& rng);
  // NaN everywhere, so an element a kernel never wrote shows up in a comparison.
  void poison();
  double at(std::int64_t i) const;
  void set(std::int64_t i, double value);

 private:
  DType dtype_;
  std::vector<std::int64_t> shape_;
  std::int64_t numel_;
  std::vector<std::uint8_t> storage_;
};

// The largest |a - b| over all elements; NaN in either makes it NaN (a poisoned element).
double max_abs_diff(const HostArray& a, const HostArray& b);

}  // namespace flashkit::app
