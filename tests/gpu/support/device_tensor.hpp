// Device copies of the host test tensors (same shape and strides), for GPU tests: copy a case's
// inputs over, poison outputs (0xFF bytes: NaN in f16, bf16 and f32) before a run, copy back.
#pragma once

#include <cstddef>

#include "attention_case.hpp"
#include "flashkit/attention.hpp"
#include "host_tensor.hpp"

namespace flashkit::testing {

class DeviceTensor {
 public:
  DeviceTensor() = default;
  // A device buffer holding `host`'s elements at the same strides (cuda:0).
  explicit DeviceTensor(const HostTensor& host);
  ~DeviceTensor();
  DeviceTensor(DeviceTensor&& other) noexcept;
  DeviceTensor& operator=(DeviceTensor&& other) noexcept;
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;

  const Tensor& view() const { return view_; }
  void poison();
  // Copies the device elements back into `host` (which must be the tensor this was made from,
  // or one of the same shape, dtype and strides).
  void copy_to(HostTensor& host) const;

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  Tensor view_;
};

// A case's inputs on the device, and its argument structs pointing at them.
struct DeviceCase {
  explicit DeviceCase(const CaseData& c);
  AttentionArgs forward_args(const CaseData& c, const Tensor& out, const Tensor& lse,
                             Algo algo) const;
  BackwardArgs backward_args(const CaseData& c, const Tensor& out, const Tensor& lse,
                             const Tensor& dout, const Tensor& dq, const Tensor& dk,
                             const Tensor& dv, Algo algo) const;

  DeviceTensor q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes;
};

// Waits for the device and fails the test with the CUDA message if anything went wrong.
void expect_device_ok();

}  // namespace flashkit::testing
