// What this build of flashkit contains and which devices it sees.
#pragma once

#include <string>
#include <vector>

namespace flashkit {

const char* version() noexcept;

struct BuildInfo {
  bool cuda = false;       // CUDA backend compiled in
  std::string cuda_archs;  // "80;90a"
  bool nccl = false;       // the NCCL ring communicator compiled in (make_nccl_ring)
  std::string cpu_isa;     // what the CPU kernels were compiled for
  std::string compiler;    // "GNU 12.2.0"
  std::string build_type;  // "Release"
};
BuildInfo build_info();

struct DeviceInfo {
  std::string name;     // "cpu (2 threads)", "NVIDIA H200 (sm_90, 132 SMs)"
  std::string backend;  // "cpu", "cuda"
  std::string kernels;  // the algorithms this device runs, best first
};
// Every device this process can run attention on, the CPU first.
std::vector<DeviceInfo> devices();

}  // namespace flashkit
