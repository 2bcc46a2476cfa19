#include "host_tensor.hpp"

#include <cmath>
#include <limits>

#include "core/numeric.hpp"

namespace flashkit::testing {

HostTensor::HostTensor(DType dtype, std::vector<std::int64_t> shape)
    : HostTensor(dtype, shape, shape) {}

HostTensor::HostTensor(DType dtype, std::vector<std::int64_t> shape,
                       std::vector<std::int64_t> alloc_shape) {
  const int rank = int(shape.size());
  std::vector<std::int64_t> strides(shape.size());
  std::int64_t running = 1;
  for (int i = rank - 1; i >= 0; --i) {
    strides[std::size_t(i)] = running;
    running *= alloc_shape[std::size_t(i)];
  }
  // At least one element so data() is never null, even for empty tensors.
  storage_.assign(std::size_t(std::max<std::int64_t>(running, 1)) * dtype_size(dtype), 0);
  view_ = Tensor::from_arrays(storage_.data(), dtype, rank, shape.data(), strides.data(),
                              Device::cpu());
}

std::int64_t HostTensor::offset_of(std::int64_t logical_index) const {
  std::int64_t off = 0;
  for (int d = view_.rank() - 1; d >= 0; --d) {
    const std::int64_t size = view_.size(d);
    off += (logical_index % size) * view_.stride(d);
    logical_index /= size;
  }
  return off;
}

void HostTensor::fill_random(std::mt19937& rng, double lo, double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  for (std::int64_t i = 0; i < numel(); ++i) {
    if (dtype() == DType::i32) {
      view_.data_as<std::int32_t>()[offset_of(i)] = std::int32_t(dist(rng));
    } else {
      core::store_from_double(view_.data(), dtype(), offset_of(i), dist(rng));
    }
  }
}

void HostTensor::poison() {
  const std::int64_t n = std::int64_t(storage_.size() / dtype_size(dtype()));
  for (std::int64_t i = 0; i < n; ++i) {
    if (dtype() == DType::i32) {
      reinterpret_cast<std::int32_t*>(storage_.data())[i] = -123456789;
    } else {
      core::store_from_double(storage_.data(), dtype(), i,
                              std::numeric_limits<double>::quiet_NaN());
    }
  }
}

std::vector<std::int64_t> HostTensor::shape() const {
  std::vector<std::int64_t> s;
  for (int i = 0; i < view_.rank(); ++i) s.push_back(view_.size(i));
  return s;
}

std::vector<double> HostTensor::values() const {
  std::vector<double> out(static_cast<std::size_t>(numel()));
  for (std::int64_t i = 0; i < numel(); ++i) out[std::size_t(i)] = at(i);
  return out;
}

void HostTensor::set_values(const std::vector<double>& values) {
  for (std::int64_t i = 0; i < numel(); ++i) {
    if (dtype() == DType::i32) {
      view_.data_as<std::int32_t>()[offset_of(i)] = std::int32_t(values[std::size_t(i)]);
    } else {
      core::store_from_double(view_.data(), dtype(), offset_of(i), values[std::size_t(i)]);
    }
  }
}

double HostTensor::at(std::int64_t logical_index) const {
  return core::load_as_double(view_.data(), dtype(), offset_of(logical_index));
}

}  // namespace flashkit::testing
