// Test-side owner of host memory behind a flashkit::Tensor view, with random fill, poisoning
// and readback in logical (row-major) order.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "flashkit/tensor.hpp"

namespace flashkit::testing {

class HostTensor {
 public:
  HostTensor() = default;
  // Contiguous [shape].
  HostTensor(DType dtype, std::vector<std::int64_t> shape);
  // A view of `shape` inside an allocation of `alloc_shape` (each dim >= shape's): strided, for
  // tests of non-contiguous inputs.
  HostTensor(DType dtype, std::vector<std::int64_t> shape, std::vector<std::int64_t> alloc_shape);
  // The view points into storage_: a copy would alias the original, so only moves.
  HostTensor(const HostTensor&) = delete;
  HostTensor& operator=(const HostTensor&) = delete;
  HostTensor(HostTensor&&) = default;
  HostTensor& operator=(HostTensor&&) = default;

  const Tensor& view() const { return view_; }
  operator const Tensor&() const { return view_; }  // NOLINT: passes where a Tensor is asked
  std::int64_t numel() const { return view_.numel(); }
  std::vector<std::int64_t> shape() const;
  DType dtype() const { return view_.dtype(); }

  // Uniform random values in [lo, hi), rounded to the dtype (never zeros: fresh inputs).
  void fill_random(std::mt19937& rng, double lo = -1.0, double hi = 1.0);
  // NaN everywhere in the allocation, so an element a kernel forgot to write is caught.
  void poison();
  // Values in logical row-major order of the view.
  std::vector<double> values() const;
  void set_values(const std::vector<double>& values);
  double at(std::int64_t logical_index) const;

 private:
  std::int64_t offset_of(std::int64_t logical_index) const;
  std::vector<std::uint8_t> storage_;
  Tensor view_;
};

}  // namespace flashkit::testing
