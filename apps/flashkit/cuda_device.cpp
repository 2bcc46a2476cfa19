// The CUDA bench device: tensors live in device memory, time comes from CUDA events around the
// call on the default stream (attention_forward returns once the launch is queued).
#include <cuda_runtime.h>

#include <string>

#include "bench_device.hpp"
#include "flashkit/error.hpp"

namespace flashkit::app {

namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw Error(std::string("CUDA ") + what + ": " + cudaGetErrorString(status));
  }
}

class CudaArray final : public DeviceArray {
 public:
  CudaArray(DType dtype, std::vector<std::int64_t> shape, std::int64_t numel)
      : dtype_(dtype), shape_(std::move(shape)), bytes_(std::size_t(numel) * dtype_size(dtype)) {
    check(cudaMalloc(&data_, bytes_ > 0 ? bytes_ : 1), "cudaMalloc");
  }
  ~CudaArray() override { cudaFree(data_); }
  CudaArray(const CudaArray&) = delete;
  CudaArray& operator=(const CudaArray&) = delete;

  Tensor view() const override {
    std::int64_t strides[4];
    std::int64_t running = 1;
    for (int i = int(shape_.size()) - 1; i >= 0; --i) {
      strides[i] = running;
      running *= shape_[std::size_t(i)];
    }
    int device = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    return Tensor::from_arrays(data_, dtype_, int(shape_.size()), shape_.data(), strides,
                               Device::cuda(device));
  }
  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  DType dtype() const { return dtype_; }
  const std::vector<std::int64_t>& shape() const { return shape_; }

 private:
  DType dtype_;
  std::vector<std::int64_t> shape_;
  std::size_t bytes_;
  void* data_ = nullptr;
};

class CudaDevice final : public BenchDevice {
 public:
  CudaDevice() {
    check(cudaEventCreate(&start_), "cudaEventCreate");
    check(cudaEventCreate(&stop_), "cudaEventCreate");
  }
  ~CudaDevice() override {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  std::string name() const override {
    int device = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    return std::string(prop.name) + " (cuda:" + std::to_string(device) + ", sm_" +
           std::to_string(prop.major * 10 + prop.minor) + ")";
  }

  bool is_cpu() const override { return false; }

  double memory_bytes() const override {
    std::size_t free_bytes = 0, total_bytes = 0;
    check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
    return double(free_bytes);
  }

  std::unique_ptr<DeviceArray> upload(const HostArray& host) override {
    auto a = std::make_unique<CudaArray>(host.dtype(), host.shape(), host.numel());
    HostArray copy = host;  // data() is non-const; the copy keeps the caller's array untouched
    check(cudaMemcpy(a->data(), copy.data(), a->bytes(), cudaMemcpyHostToDevice), "cudaMemcpy");
    return a;
  }

  std::unique_ptr<DeviceArray> allocate(DType dtype,
                                        const std::vector<std::int64_t>& shape) override {
    std::int64_t numel = 1;
    for (auto s : shape) numel *= s;
    return std::make_unique<CudaArray>(dtype, shape, numel);
  }

  HostArray download(const DeviceArray& array) override {
    const auto& a = static_cast<const CudaArray&>(array);
    HostArray host(a.dtype(), a.shape());
    check(cudaMemcpy(host.data(), a.data(), a.bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy");
    return host;
  }

  double time_ms(const std::function<void()>& fn) override {
    check(cudaEventRecord(start_), "cudaEventRecord");
    fn();
    check(cudaEventRecord(stop_), "cudaEventRecord");
    check(cudaEventSynchronize(stop_), "cudaEventSynchronize");
    float ms = 0.0f;
    check(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
    return double(ms);
  }

 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

}  // namespace

bool cuda_device_present() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

std::unique_ptr<BenchDevice> make_cuda_device() {
  return std::make_unique<CudaDevice>();
}

}  // namespace flashkit::app
