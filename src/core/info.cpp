#include "flashkit/info.hpp"

#include <string>

#include "core/build_config.hpp"
#include "cpu/isa.hpp"
#include "cpu/parallel.hpp"

#if FLASHKIT_HAVE_CUDA
#include "cuda/cuda_backend.hpp"
#endif

namespace flashkit {

using core::kBuildType;
using core::kCompiler;
using core::kCudaArchs;
using core::kVersion;

const char* version() noexcept {
  return kVersion;
}

BuildInfo build_info() {
  BuildInfo info;
#if FLASHKIT_HAVE_CUDA
  info.cuda = true;
  info.cuda_archs = kCudaArchs;
#endif
  info.nccl = FLASHKIT_HAVE_NCCL;
  info.cpu_isa = cpu::isa_name();
  info.compiler = kCompiler;
  info.build_type = kBuildType;
  return info;
}

std::vector<DeviceInfo> devices() {
  std::vector<DeviceInfo> out;
  out.push_back(
      {"cpu (" + std::to_string(cpu::num_threads()) + " threads, " + cpu::isa_name() + ")", "cpu",
       "fa2 (tiled fp32), naive, reference (fp64)"});
#if FLASHKIT_HAVE_CUDA
  for (DeviceInfo& d : cuda::devices()) out.push_back(std::move(d));
#endif
  return out;
}

}  // namespace flashkit
