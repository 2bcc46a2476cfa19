#include "host_array.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/numeric.hpp"

namespace flashkit::app {

namespace {

std::int64_t product(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (const std::int64_t s : shape) n *= s;
  return n;
}

// Row-major strides of `shape`.
std::vector<std::int64_t> contiguous_strides(const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> strides(shape.size(), 1);
  for (std::size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
  return strides;
}

}  // namespace

HostArray::HostArray(DType dtype, std::vector<std::int64_t> shape)
    : dtype_(dtype),
      shape_(std::move(shape)),
      numel_(product(shape_)),
      storage_(static_cast<std::size_t>(numel_) * dtype_size(dtype)) {}

Tensor HostArray::view() const {
  const std::vector<std::int64_t> strides = contiguous_strides(shape_);
  // Tensor views carry a writable pointer whatever their use; a const array is only ever read.
  return Tensor::from_arrays(const_cast<std::uint8_t*>(storage_.data()), dtype_, int(shape_.size()),
                             shape_.data(), strides.data(), Device::cpu());
}

void HostArray::fill_random(std::mt19937& rng) {
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  for (std::int64_t i = 0; i < numel(); ++i) set(i, dist(rng));
}

void HostArray::poison() {
  for (std::int64_t i = 0; i < numel(); ++i) set(i, std::numeric_limits<double>::quiet_NaN());
}

double HostArray::at(std::int64_t i) const {
  return core::load_as_double(storage_.data(), dtype(), i);
}

void HostArray::set(std::int64_t i, double value) {
  core::store_from_double(storage_.data(), dtype(), i, value);
}

double max_abs_diff(const HostArray& a, const HostArray& b) {
  double worst = 0.0;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    const double diff = std::fabs(a.at(i) - b.at(i));
    if (std::isnan(diff)) return diff;
    worst = std::max(worst, diff);
  }
  return worst;
}

}  // namespace flashkit::app
