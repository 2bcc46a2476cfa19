// The CPU bench device: tensors are host arrays, time is the wall clock (attention_forward on the
// CPU returns when the work is done).
#include <unistd.h>

#include <fstream>
#include <string>

#include "bench_device.hpp"
#include "flashkit/info.hpp"
#include "timer.hpp"

namespace flashkit::app {

namespace {

class CpuArray final : public DeviceArray {
 public:
  explicit CpuArray(HostArray host) : host_(std::move(host)) {}
  Tensor view() const override { return host_.view(); }
  const HostArray& host() const { return host_; }

 private:
  HostArray host_;
};

// "Intel(R) Xeon(R) Processor" from /proc/cpuinfo, or "" where there is none.
std::string cpu_model() {
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const std::size_t colon = line.find(':');
    if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
  }
  return "";
}

class CpuDevice final : public BenchDevice {
 public:
  std::string name() const override {
    const std::string model = cpu_model();
    // devices() puts the CPU first: "cpu (2 threads, avx512)".
    return (model.empty() ? "" : model + ", ") + devices().front().name;
  }

  bool is_cpu() const override { return true; }

  double memory_bytes() const override {
    return double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
  }

  std::unique_ptr<DeviceArray> upload(const HostArray& host) override {
    return std::make_unique<CpuArray>(host);
  }

  std::unique_ptr<DeviceArray> allocate(DType dtype,
                                        const std::vector<std::int64_t>& shape) override {
    return std::make_unique<CpuArray>(HostArray(dtype, shape));
  }

  HostArray download(const DeviceArray& array) override {
    return static_cast<const CpuArray&>(array).host();
  }

  double time_ms(const std::function<void()>& fn) override {
    const Stopwatch watch;
    fn();
    return watch.elapsed_ms();
  }
};

}  // namespace

std::unique_ptr<BenchDevice> make_cpu_device() {
  return std::make_unique<CpuDevice>();
}

}  // namespace flashkit::app
