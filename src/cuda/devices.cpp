// What `flashkit info` lists for CUDA.
#include <cuda_runtime.h>

#include <string>

#include "cuda/cuda_backend.hpp"
#if FLASHKIT_HAVE_SM90
#include "cuda/sm90/fwd_sm90.hpp"
#endif

namespace flashkit::cuda {

std::vector<DeviceInfo> devices() {
  std::vector<DeviceInfo> out;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: nothing to list, and clear the sticky error
    return out;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    const int cc = prop.major * 10 + prop.minor;
    DeviceInfo d;
    d.name = std::string(prop.name) + " (sm_" + std::to_string(cc) + ", " +
             std::to_string(prop.multiProcessorCount) + " SMs)";
    d.backend = "cuda";
    d.kernels = cc >= 80
                    ? "fa2 (sm80 mma.sync; f32 inputs on CUDA cores, fa1 above d 256), fa1, naive"
                    : "fa2 for f32 inputs only (CUDA cores), fa1, naive";
#if FLASHKIT_HAVE_SM90
    if (cc == 90) {
      d.kernels = "fa3 (sm90 wgmma + TMA, head dims " + sm90::fwd_head_dims_text() +
                  "; other head dims fall back to fa2), " + d.kernels;
    }
#endif
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace flashkit::cuda
