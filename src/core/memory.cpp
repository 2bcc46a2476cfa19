#include "flashkit/memory.hpp"

#include "core/build_config.hpp"

#if FLASHKIT_HAVE_CUDA
#include "cuda/cuda_backend.hpp"
#endif

namespace flashkit {

ScratchMemory scratch_memory() {
  ScratchMemory m;
#if FLASHKIT_HAVE_CUDA
  m.reserved_bytes = cuda::scratch_reserved_bytes();
  m.keep_bytes = cuda::kScratchKeepBytesPerDevice;
#endif
  return m;
}

void release_scratch_memory() {
#if FLASHKIT_HAVE_CUDA
  cuda::release_scratch();
#endif
}

}  // namespace flashkit
