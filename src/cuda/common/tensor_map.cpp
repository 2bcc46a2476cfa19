#include "cuda/common/tensor_map.hpp"

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/common/cuda_check.hpp"
#include "flashkit/error.hpp"

namespace flashkit::cuda {
namespace {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                 const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiled encoder() {
  static const EncodeTiled fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    // 12000: the cuTensorMapEncodeTiled ABI introduced with CUDA 12.0, unchanged since.
    check_cuda(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                                cudaEnableDefault, &found),
               "looking up cuTensorMapEncodeTiled");
    if (found != cudaDriverEntryPointSuccess || p == nullptr) {
      throw Error("cuTensorMapEncodeTiled: the CUDA driver does not provide it (needs 12.0+)");
    }
    return reinterpret_cast<EncodeTiled>(p);
  }();
  return fn;
}

CUtensorMapDataType map_type(DType dtype) {
  switch (dtype) {
    case DType::f16:
      return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    case DType::bf16:
      return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    case DType::f32:
      return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    case DType::e4m3:
    case DType::e5m2:
      return CU_TENSOR_MAP_DATA_TYPE_UINT8;
    case DType::i32:
      return CU_TENSOR_MAP_DATA_TYPE_INT32;
    case DType::f64:
      return CU_TENSOR_MAP_DATA_TYPE_FLOAT64;
  }
  throw Error("tensor map dtype", "a known dtype", std::to_string(static_cast<int>(dtype)));
}

CUtensorMapSwizzle map_swizzle(ptx::Swizzle s) {
  switch (s) {
    case ptx::Swizzle::none:
      return CU_TENSOR_MAP_SWIZZLE_NONE;
    case ptx::Swizzle::b128:
      return CU_TENSOR_MAP_SWIZZLE_128B;
    case ptx::Swizzle::b64:
      return CU_TENSOR_MAP_SWIZZLE_64B;
    case ptx::Swizzle::b32:
      return CU_TENSOR_MAP_SWIZZLE_32B;
  }
  throw Error("tensor map swizzle", "none, 128B, 64B or 32B", std::to_string(static_cast<int>(s)));
}

void check_spec(const TensorMapSpec& spec) {
  const std::size_t rank = spec.dims.size();
  if (rank < 1 || rank > 5) {
    throw Error("tensor map dims", "rank 1..5", std::to_string(rank));
  }
  if (spec.box.size() != rank || spec.strides_bytes.size() + 1 != rank) {
    throw Error(
        "tensor map box/strides",
        std::to_string(rank) + " box extents and " + std::to_string(rank - 1) + " strides",
        std::to_string(spec.box.size()) + " and " + std::to_string(spec.strides_bytes.size()));
  }
  if (reinterpret_cast<std::uintptr_t>(spec.base) % 16 != 0) {
    throw Error("tensor map base", "a 16-byte aligned address", "misaligned");
  }
  for (std::size_t i = 0; i < rank; ++i) {
    if (spec.dims[i] < 1 || spec.dims[i] > (std::uint64_t{1} << 32)) {
      throw Error("tensor map dims[" + std::to_string(i) + "]", "1..2^32",
                  std::to_string(spec.dims[i]));
    }
    if (spec.box[i] < 1 || spec.box[i] > 256) {
      throw Error("tensor map box[" + std::to_string(i) + "]", "1..256",
                  std::to_string(spec.box[i]));
    }
  }
  for (std::size_t i = 0; i + 1 < rank; ++i) {
    if (spec.strides_bytes[i] % 16 != 0 || spec.strides_bytes[i] >= (std::uint64_t{1} << 40)) {
      throw Error("tensor map strides_bytes[" + std::to_string(i) + "]",
                  "a multiple of 16 below 2^40", std::to_string(spec.strides_bytes[i]));
    }
  }
  const std::uint64_t inner_bytes = spec.box[0] * dtype_size(spec.dtype);
  if (inner_bytes % 16 != 0) {
    throw Error("tensor map box[0]", "a multiple of 16 bytes", std::to_string(inner_bytes));
  }
  if (spec.swizzle != ptx::Swizzle::none &&
      inner_bytes > static_cast<std::uint64_t>(ptx::swizzle_span_bytes(spec.swizzle))) {
    throw Error("tensor map box[0]",
                "at most the swizzle span of " +
                    std::to_string(ptx::swizzle_span_bytes(spec.swizzle)) + " bytes",
                std::to_string(inner_bytes) + " bytes");
  }
}

}  // namespace

CUtensorMap make_tensor_map(const TensorMapSpec& spec) {
  check_spec(spec);
  const auto rank = static_cast<cuuint32_t>(spec.dims.size());
  std::vector<cuuint32_t> element_strides(rank, 1);
  CUtensorMap map{};
  const CUresult r =
      encoder()(&map, map_type(spec.dtype), rank, const_cast<void*>(spec.base), spec.dims.data(),
                spec.strides_bytes.data(), spec.box.data(), element_strides.data(),
                CU_TENSOR_MAP_INTERLEAVE_NONE, map_swizzle(spec.swizzle),
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    throw Error("cuTensorMapEncodeTiled", "CUDA_SUCCESS", "CUresult " + std::to_string(r));
  }
  return map;
}

}  // namespace flashkit::cuda
