// The device memory flashkit keeps between calls.
#pragma once

#include <cstdint>

namespace flashkit {

// Scratch memory (the lineage kernels' S and P, the fp32 forward's split states, the backward's
// dQ accumulator) comes from a stream-ordered pool per CUDA device that keeps up to
// `keep_bytes` of freed memory across synchronisations, so that a caller who synchronises after
// every call does not map it afresh each time. `reserved_bytes`: what the pools hold now, in
// use or kept, over every device (0 without CUDA, or before any call needed scratch).
struct ScratchMemory {
  std::uint64_t reserved_bytes = 0;
  std::uint64_t keep_bytes = 0;  // per device
};
ScratchMemory scratch_memory();

// Hands the kept scratch memory of every device back to the driver; the next call that needs
// scratch allocates it again. Memory whose release is still queued on a stream stays reserved:
// synchronise the streams flashkit ran on first. Thread-safe; a no-op without CUDA.
void release_scratch_memory();

}  // namespace flashkit
