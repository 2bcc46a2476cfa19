// Scratch device memory ordered on the caller's stream (cudaMallocAsync / cudaFreeAsync): the
// lineage kernels' workspaces and the backward's dQ accumulator. Freed when the owner goes out
// of scope; the free is queued behind the kernels that use it, so no sync is needed.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "cuda/common/cuda_check.hpp"

namespace flashkit::cuda {

class StreamBuffer {
 public:
  StreamBuffer(std::size_t bytes, cudaStream_t stream) : stream_(stream) {
    if (bytes > 0) check_cuda(cudaMallocAsync(&ptr_, bytes, stream), "cudaMallocAsync");
  }
  ~StreamBuffer() {
    if (ptr_ != nullptr) cudaFreeAsync(ptr_, stream_);
  }
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;

  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  cudaStream_t stream_;
};

}  // namespace flashkit::cuda
