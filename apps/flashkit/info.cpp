// `flashkit info`: what this build contains and which devices it sees.
#include <cstdio>

#include "commands.hpp"
#include "flashkit/info.hpp"

namespace flashkit::app {

int run_info() {
  const BuildInfo b = build_info();
  std::printf("flashkit %s\n", version());
  std::printf("build:\n");
  std::printf("  type        %s\n", b.build_type.c_str());
  std::printf("  compiler    %s\n", b.compiler.c_str());
  std::printf("  cpu isa     %s\n", b.cpu_isa.c_str());
  std::printf("  cuda        %s\n", b.cuda ? ("yes, archs " + b.cuda_archs).c_str() : "no");
  std::printf("  nccl        %s\n", b.nccl ? "yes (make_nccl_ring)" : "no");
  std::printf("devices:\n");
  for (const DeviceInfo& d : devices()) {
    std::printf("  %-5s %s\n        algorithms: %s\n", d.backend.c_str(), d.name.c_str(),
                d.kernels.c_str());
  }
  return 0;
}

}  // namespace flashkit::app
