// Picks the bench device named by `--device`.
#include <string>

#include "bench_device.hpp"
#include "flashkit/error.hpp"

namespace flashkit::app {

std::vector<std::string> bench_device_names() {
  return {"auto", "cpu", "cuda"};
}

std::unique_ptr<BenchDevice> make_bench_device(const std::string& name) {
#if FLASHKIT_APP_HAVE_CUDA
  // "auto" takes the GPU when the build has the CUDA backend and the machine has a device.
  if (name == "cuda" || (name == "auto" && cuda_device_present())) {
    if (!cuda_device_present()) throw Error("--device cuda: no CUDA device is visible");
    return make_cuda_device();
  }
#else
  if (name == "cuda") throw Error("--device cuda: this build has no CUDA backend");
#endif
  return make_cpu_device();
}

}  // namespace flashkit::app
