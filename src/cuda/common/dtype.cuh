// Element access by run-time dtype for the simple kernels (lineage, merge), where one kernel
// serves f32, f16 and bf16 and a switch per element costs nothing next to their memory traffic.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "flashkit/tensor.hpp"

namespace flashkit::cuda {

// One element as a float, by its static type (for loops that switch on the dtype once outside).
__device__ __forceinline__ float to_float(float x) {
  return x;
}
__device__ __forceinline__ float to_float(__half x) {
  return __half2float(x);
}
__device__ __forceinline__ float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

__device__ __forceinline__ float load_as_float(const void* base, DType dtype, std::int64_t i) {
  switch (dtype) {
    case DType::f16:
      return __half2float(static_cast<const __half*>(base)[i]);
    case DType::bf16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    default:
      return static_cast<const float*>(base)[i];
  }
}

__device__ __forceinline__ void store_from_float(void* base, DType dtype, std::int64_t i,
                                                 float value) {
  switch (dtype) {
    case DType::f16:
      static_cast<__half*>(base)[i] = __float2half_rn(value);
      return;
    case DType::bf16:
      static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(value);
      return;
    default:
      static_cast<float*>(base)[i] = value;
      return;
  }
}

}  // namespace flashkit::cuda
