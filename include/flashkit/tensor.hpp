// flashkit::Tensor: a non-owning view of memory that someone else allocated (a torch tensor, a
// numpy array, a cudaMalloc'd buffer). It carries what the library needs to check a call and
// address elements: pointer, dtype, device, shape and strides in elements (rank <= 4).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace flashkit {

enum class DType : std::uint8_t { f64, f32, f16, bf16, e4m3, e5m2, i32 };

// Bytes per element.
std::size_t dtype_size(DType dtype) noexcept;
// "bf16", "f32", ...
const char* dtype_name(DType dtype) noexcept;
// True for the dtypes attention can read as inputs (f64, f32, f16, bf16, e4m3, e5m2).
bool is_floating(DType dtype) noexcept;

struct Device {
  enum class Kind : std::uint8_t { cpu, cuda };
  Kind kind = Kind::cpu;
  int index = 0;  // CUDA ordinal; 0 for the CPU

  static Device cpu() { return {Kind::cpu, 0}; }
  static Device cuda(int ordinal) { return {Kind::cuda, ordinal}; }
  bool is_cpu() const { return kind == Kind::cpu; }
  bool is_cuda() const { return kind == Kind::cuda; }
  bool operator==(const Device& o) const { return kind == o.kind && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const;  // "cpu", "cuda:0"
};

class Tensor {
 public:
  static constexpr int kMaxRank = 4;

  // An undefined tensor: optional arguments left out.
  Tensor() = default;
  // A view with explicit strides (in elements, not bytes).
  Tensor(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
         std::initializer_list<std::int64_t> strides, Device device = Device::cpu());
  // A row-major contiguous view.
  Tensor(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
         Device device = Device::cpu());
  // Rank and sizes from arrays, for bindings that do not know the rank at compile time.
  static Tensor from_arrays(void* data, DType dtype, int rank, const std::int64_t* shape,
                            const std::int64_t* strides, Device device);

  bool defined() const { return rank_ > 0 || data_ != nullptr; }
  void* data() const { return data_; }
  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data_);
  }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int rank() const { return rank_; }
  std::int64_t size(int dim) const { return shape_[static_cast<std::size_t>(dim)]; }
  std::int64_t stride(int dim) const { return strides_[static_cast<std::size_t>(dim)]; }
  std::int64_t numel() const;
  bool is_contiguous() const;
  std::string shape_str() const;  // "[2, 128, 8, 64]"

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::f32;
  Device device_{};
  int rank_ = 0;
  std::array<std::int64_t, kMaxRank> shape_{};
  std::array<std::int64_t, kMaxRank> strides_{};
};

}  // namespace flashkit
