// Scratch device memory ordered on the caller's stream (cudaMallocFromPoolAsync /
// cudaFreeAsync): the lineage kernels' workspaces, the fp32 forward's split states and the
// backward's dQ accumulator. Freed when the owner goes out of scope; the free is queued behind
// the kernels that use it, so no sync is needed.
//
// The memory comes from flashkit's own pool on the current device, which keeps up to
// kScratchKeepBytesPerDevice (cuda_backend.hpp; flashkit::scratch_memory reports it,
// flashkit::release_scratch_memory hands it back) of freed memory across synchronisations. The
// device's default pool keeps none (release threshold 0), so a caller that synchronises after each
// call (the flashkit command's bench does) would have every call map its scratch afresh. Measured
// on the H200, one head, N = 512: the fp32 forward took 0.088 ms from the default pool and 0.050 ms
// from this one, naive bf16 0.112 and 0.045 ms (docs/kernels/cuda_fp32_fwd.md, v3).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/common/cuda_check.hpp"
#include "cuda/cuda_backend.hpp"

namespace flashkit::cuda {

// flashkit's scratch pool on the current device, created on first use (thread-safe).
cudaMemPool_t scratch_pool();

class StreamBuffer {
 public:
  StreamBuffer(std::size_t bytes, cudaStream_t stream) : stream_(stream) {
    if (bytes > 0) {
      check_cuda(cudaMallocFromPoolAsync(&ptr_, bytes, scratch_pool(), stream),
                 "cudaMallocFromPoolAsync");
    }
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
