// Where `flashkit bench` runs attention. The sweep only sees this interface, so a CUDA device
// (device memory, uploads, CUDA-event timing) is one more implementation in its own file.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "flashkit/tensor.hpp"
#include "host_array.hpp"

namespace flashkit::app {

// A tensor in the device's memory.
class DeviceArray {
 public:
  virtual ~DeviceArray() = default;
  virtual Tensor view() const = 0;
};

class BenchDevice {
 public:
  virtual ~BenchDevice() = default;
  // "cpu: Intel(R) Xeon(R) Processor (2 threads, avx512)", for the report.
  virtual std::string name() const = 0;
  // The CPU's sgemm rate is this device's yardstick only on the CPU.
  virtual bool is_cpu() const = 0;
  // Memory the naive algorithm's S and P must fit in.
  virtual double memory_bytes() const = 0;
  virtual std::unique_ptr<DeviceArray> upload(const HostArray& host) = 0;
  virtual std::unique_ptr<DeviceArray> allocate(DType dtype,
                                                const std::vector<std::int64_t>& shape) = 0;
  virtual HostArray download(const DeviceArray& array) = 0;
  // Wall time of one call of fn in ms, with the device idle before and after it.
  virtual double time_ms(const std::function<void()>& fn) = 0;
};

// "cpu", "cuda", or "auto" (the best device this build can bench). A device the build lacks is
// a flashkit::Error.
std::unique_ptr<BenchDevice> make_bench_device(const std::string& name);

// The bench devices `--device` accepts, for the usage text.
std::vector<std::string> bench_device_names();

// The CPU device; cpu_device.cpp.
std::unique_ptr<BenchDevice> make_cpu_device();

// The CUDA device (cuda_device.cpp, built when the library has the CUDA backend).
bool cuda_device_present();
std::unique_ptr<BenchDevice> make_cuda_device();

}  // namespace flashkit::app
