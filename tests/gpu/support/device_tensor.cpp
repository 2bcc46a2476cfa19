#include "device_tensor.hpp"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace flashkit::testing {

namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
  }
}

// Bytes from the first element to one past the last one that the view can address.
std::size_t span_bytes(const Tensor& t) {
  if (t.numel() == 0) return 0;
  std::int64_t last = 0;
  for (int i = 0; i < t.rank(); ++i) last += (t.size(i) - 1) * t.stride(i);
  return std::size_t(last + 1) * dtype_size(t.dtype());
}

Tensor on_device(const Tensor& t, void* data) {
  std::int64_t shape[Tensor::kMaxRank], strides[Tensor::kMaxRank];
  for (int i = 0; i < t.rank(); ++i) {
    shape[i] = t.size(i);
    strides[i] = t.stride(i);
  }
  return Tensor::from_arrays(data, t.dtype(), t.rank(), shape, strides, Device::cuda(0));
}

}  // namespace

DeviceTensor::DeviceTensor(const HostTensor& host) {
  if (!host.view().defined()) return;
  bytes_ = span_bytes(host.view());
  // Every allocation gets at least 16 bytes so that even empty tensors have an aligned,
  // non-null pointer.
  check(cudaMalloc(&data_, bytes_ < 16 ? 16 : bytes_), "cudaMalloc");
  if (bytes_ > 0) {
    check(cudaMemcpy(data_, host.view().data(), bytes_, cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  view_ = on_device(host.view(), data_);
}

DeviceTensor::~DeviceTensor() {
  if (data_ != nullptr) cudaFree(data_);
}

DeviceTensor::DeviceTensor(DeviceTensor&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      view_(std::exchange(other.view_, Tensor())) {}

DeviceTensor& DeviceTensor::operator=(DeviceTensor&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    view_ = std::exchange(other.view_, Tensor());
  }
  return *this;
}

void DeviceTensor::poison() {
  if (bytes_ > 0) check(cudaMemset(data_, 0xFF, bytes_), "cudaMemset");
}

void DeviceTensor::copy_to(HostTensor& host) const {
  if (bytes_ == 0) return;
  check(cudaMemcpy(host.view().data(), data_, bytes_, cudaMemcpyDeviceToHost), "cudaMemcpy");
}

DeviceCase::DeviceCase(const CaseData& c)
    : q(c.q),
      k(c.k),
      v(c.v),
      cu_seqlens_q(c.cu_seqlens_q),
      cu_seqlens_k(c.cu_seqlens_k),
      alibi_slopes(c.alibi_slopes) {}

namespace {

void point_at_device(AttentionProblem& p, const DeviceCase& d) {
  p.q = d.q.view();
  p.k = d.k.view();
  p.v = d.v.view();
  if (p.varlen.enabled()) {
    p.varlen.cu_seqlens_q = d.cu_seqlens_q.view();
    p.varlen.cu_seqlens_k = d.cu_seqlens_k.view();
  }
  if (p.mask.alibi_slopes.defined()) p.mask.alibi_slopes = d.alibi_slopes.view();
}

}  // namespace

AttentionArgs DeviceCase::forward_args(const CaseData& c, const Tensor& out, const Tensor& lse,
                                       Algo algo) const {
  AttentionArgs a = c.forward_args(out, lse, algo);
  point_at_device(a, *this);
  return a;
}

BackwardArgs DeviceCase::backward_args(const CaseData& c, const Tensor& out, const Tensor& lse,
                                       const Tensor& dout, const Tensor& dq, const Tensor& dk,
                                       const Tensor& dv, Algo algo) const {
  BackwardArgs a = c.backward_args(out, lse, dq, dk, dv, algo);
  a.dout = dout;
  point_at_device(a, *this);
  return a;
}

void expect_device_ok() {
  const cudaError_t sync = cudaDeviceSynchronize();
  EXPECT_EQ(sync, cudaSuccess) << cudaGetErrorString(sync);
  const cudaError_t last = cudaGetLastError();
  EXPECT_EQ(last, cudaSuccess) << cudaGetErrorString(last);
}

}  // namespace flashkit::testing
