#include "flashkit/tensor.hpp"

#include <string>

#include "flashkit/error.hpp"

namespace flashkit {

std::size_t dtype_size(DType dtype) noexcept {
  switch (dtype) {
    case DType::f64:
      return 8;
    case DType::f32:
    case DType::i32:
      return 4;
    case DType::f16:
    case DType::bf16:
      return 2;
    case DType::e4m3:
    case DType::e5m2:
      return 1;
  }
  return 0;
}

const char* dtype_name(DType dtype) noexcept {
  switch (dtype) {
    case DType::f64:
      return "f64";
    case DType::f32:
      return "f32";
    case DType::i32:
      return "i32";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::e4m3:
      return "e4m3";
    case DType::e5m2:
      return "e5m2";
  }
  return "?";
}

bool is_floating(DType dtype) noexcept {
  return dtype != DType::i32;
}

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

Tensor Tensor::from_arrays(void* data, DType dtype, int rank, const std::int64_t* shape,
                           const std::int64_t* strides, Device device) {
  if (rank < 1 || rank > kMaxRank) {
    throw Error("tensor rank", "1.." + std::to_string(kMaxRank), std::to_string(rank));
  }
  Tensor t;
  t.data_ = data;
  t.dtype_ = dtype;
  t.device_ = device;
  t.rank_ = rank;
  for (int i = 0; i < rank; ++i) {
    if (shape[i] < 0) {
      throw Error("tensor shape[" + std::to_string(i) + "]", "a size >= 0",
                  std::to_string(shape[i]));
    }
    t.shape_[std::size_t(i)] = shape[i];
    t.strides_[std::size_t(i)] = strides[i];
  }
  return t;
}

Tensor::Tensor(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
               std::initializer_list<std::int64_t> strides, Device device) {
  if (shape.size() != strides.size()) {
    throw Error("tensor strides", std::to_string(shape.size()) + " strides (one per dim)",
                std::to_string(strides.size()));
  }
  *this = from_arrays(data, dtype, int(shape.size()), shape.begin(), strides.begin(), device);
}

Tensor::Tensor(void* data, DType dtype, std::initializer_list<std::int64_t> shape, Device device) {
  std::array<std::int64_t, kMaxRank> strides{};
  std::int64_t running = 1;
  const int rank = int(shape.size());
  for (int i = rank - 1; i >= 0; --i) {
    strides[std::size_t(i)] = running;
    running *= shape.begin()[i];
  }
  *this = from_arrays(data, dtype, rank, shape.begin(), strides.data(), device);
}

std::int64_t Tensor::numel() const {
  std::int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= shape_[std::size_t(i)];
  return rank_ == 0 ? 0 : n;
}

bool Tensor::is_contiguous() const {
  std::int64_t running = 1;
  for (int i = rank_ - 1; i >= 0; --i) {
    if (shape_[std::size_t(i)] != 1 && strides_[std::size_t(i)] != running) return false;
    running *= shape_[std::size_t(i)];
  }
  return true;
}

std::string Tensor::shape_str() const {
  std::string s = "[";
  for (int i = 0; i < rank_; ++i) {
    s += (i ? ", " : "") + std::to_string(shape_[std::size_t(i)]);
  }
  return s + "]";
}

}  // namespace flashkit
