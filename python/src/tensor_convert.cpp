#include "tensor_convert.hpp"

#include <array>
#include <cstdint>

#include "flashkit/error.hpp"

namespace nb = nanobind;

namespace flashkit::python {

namespace {

using nb::dlpack::dtype_code;

std::string dlpack_dtype_str(nb::dlpack::dtype t) {
  return "DLPack dtype (code " + std::to_string(t.code) + ", " + std::to_string(t.bits) +
         " bits, " + std::to_string(t.lanes) + " lanes)";
}

// DLPack (>= 1.1) type codes of float8, spelled out because older nanobind releases do not name
// them. e4m3 is the OCP "fn" variant (no infinities) that NVIDIA hardware and
// torch.float8_e4m3fn use; e5m2 is IEEE-like.
constexpr std::uint8_t kFloat8E4M3FN = 10, kFloat8E5M2 = 12;

DType to_dtype(nb::dlpack::dtype t, const std::string& name) {
  if (t.lanes == 1 && t.bits == 8) {
    if (t.code == kFloat8E4M3FN) return DType::e4m3;
    if (t.code == kFloat8E5M2) return DType::e5m2;
  }
  if (t.lanes == 1) {
    switch (static_cast<dtype_code>(t.code)) {
      case dtype_code::Float:
        if (t.bits == 64) return DType::f64;
        if (t.bits == 32) return DType::f32;
        if (t.bits == 16) return DType::f16;
        break;
      case dtype_code::Bfloat:
        if (t.bits == 16) return DType::bf16;
        break;
      case dtype_code::Int:
        if (t.bits == 32) return DType::i32;
        break;
      default:
        break;
    }
  }
  throw Error(name + ".dtype", "one of f64, f32, f16, bf16, float8 e4m3fn/e5m2, int32",
              dlpack_dtype_str(t));
}

// DLPack device types: 1 CPU, 2 CUDA, 3 CUDA pinned host memory (addressed by the CPU).
Device to_device(int type, int id, const std::string& name) {
  constexpr int kCpu = 1, kCuda = 2, kCudaHost = 3;
  if (type == kCpu || type == kCudaHost) return Device::cpu();
  if (type == kCuda) return Device::cuda(id);
  throw Error(name + ".device", "cpu or cuda memory", "DLPack device type " + std::to_string(type));
}

template <typename Array>
Tensor convert(const Array& a, void* data, const std::string& name) {
  const int rank = int(a.ndim());
  if (rank < 1 || rank > Tensor::kMaxRank) {
    throw Error(name + ".ndim", "1.." + std::to_string(Tensor::kMaxRank), std::to_string(rank));
  }
  std::array<std::int64_t, Tensor::kMaxRank> shape{}, strides{};
  for (int i = 0; i < rank; ++i) {
    shape[std::size_t(i)] = std::int64_t(a.shape(std::size_t(i)));
    strides[std::size_t(i)] = a.stride(std::size_t(i));  // DLPack strides are in elements
  }
  return Tensor::from_arrays(data, to_dtype(a.dtype(), name), rank, shape.data(), strides.data(),
                             to_device(a.device_type(), a.device_id(), name));
}

}  // namespace

Tensor to_tensor(const InArray& a, const std::string& name) {
  // flashkit::Tensor has one pointer type for inputs and outputs; the API never writes inputs.
  return convert(a, const_cast<void*>(a.data()), name);
}

Tensor to_tensor(const OutArray& a, const std::string& name) {
  return convert(a, a.data(), name);
}

}  // namespace flashkit::python
