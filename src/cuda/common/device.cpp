#include "cuda/common/device.hpp"

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>

#include "core/validate.hpp"

namespace flashkit::cuda {

int current_device_capability(const std::string& argument, const Device& device) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    core::fail(argument + ".device",
               std::string("a visible CUDA device (") +
                   (status != cudaSuccess ? cudaGetErrorString(status) : "none found") + ")",
               device.str());
  }
  if (device.index < 0 || device.index >= count) {
    core::fail(argument + ".device", "cuda:0 .. cuda:" + std::to_string(count - 1), device.str());
  }
  int current = 0;
  cudaGetDevice(&current);
  if (device.index != current) {
    core::fail(argument + ".device",
               "cuda:" + std::to_string(current) + " (the current device; call cudaSetDevice)",
               device.str());
  }
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device.index);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device.index);
  return major * 10 + minor;
}

int multiprocessor_count(const Device& device) {
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device.index) != cudaSuccess) {
    cudaGetLastError();
    return 1;
  }
  return sms > 0 ? sms : 1;
}

int current_device_smem_optin() {
  int device = 0, bytes = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
          cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return bytes;
}

int tile_smem_limit() {
  const int device = current_device_smem_optin();
  const char* env = std::getenv("FLASHKIT_SMEM_LIMIT_KB");
  if (env == nullptr) return device;
  char* end = nullptr;
  const long kb = std::strtol(env, &end, 10);
  if (end == env || *end != '\0' || kb < 1) {
    core::fail("FLASHKIT_SMEM_LIMIT_KB", "a positive integer (or unset)",
               std::string("'") + env + "'");
  }
  return kb * 1024 < device ? int(kb * 1024) : device;
}

void check_cp_async_rows(const std::string& argument, const Tensor& t) {
  const auto address = reinterpret_cast<std::uintptr_t>(t.data());
  if (address % 16 != 0) {
    core::fail(argument + ".data", "a 16-byte aligned pointer (cp.async copies 16-byte rows)",
               "an address = " + std::to_string(address % 16) + " mod 16");
  }
  const std::int64_t elems = 16 / std::int64_t(dtype_size(t.dtype()));
  for (int i = 0; i + 1 < t.rank(); ++i) {
    if (t.stride(i) % elems != 0) {
      core::fail(argument + ".stride[" + std::to_string(i) + "]",
                 "a multiple of " + std::to_string(elems) + " elements (16-byte aligned rows)",
                 std::to_string(t.stride(i)));
    }
  }
}

}  // namespace flashkit::cuda
