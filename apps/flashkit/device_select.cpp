// Picks the bench device named by `--device`.
#include <string>

#include "bench_device.hpp"
#include "flashkit/error.hpp"
#include "flashkit/info.hpp"

namespace flashkit::app {

namespace {

bool library_has_cuda_device() {
  for (const DeviceInfo& d : devices()) {
    if (d.backend == "cuda") return true;
  }
  return false;
}

}  // namespace

std::vector<std::string> bench_device_names() {
  return {"auto", "cpu", "cuda"};
}

std::unique_ptr<BenchDevice> make_bench_device(const std::string& name) {
  if (name == "cuda") {
    if (!build_info().cuda || !library_has_cuda_device()) {
      throw Error("no CUDA device in this build");
    }
    // The library has a CUDA backend, but benching it needs CUDA memory, which this command
    // cannot allocate until it links the CUDA runtime (a cuda_device.cpp next to cpu_device.cpp).
    throw Error("--device cuda: the flashkit command cannot bench CUDA devices yet");
  }
  // "auto" and "cpu": the CPU is the only device the command drives so far.
  return make_cpu_device();
}

}  // namespace flashkit::app
