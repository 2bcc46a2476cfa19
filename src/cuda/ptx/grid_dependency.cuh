// Programmatic dependent launch (sm90+, PTX griddepcontrol): a kernel launched with
// cudaLaunchAttributeProgrammaticStreamSerialization (common/dependent_launch.hpp) may start
// while the kernel before it in the stream is still running, once every CTA of that kernel has
// called launch_dependents() or exited. It must call wait_for_prior_grid() before it touches
// what the earlier kernel writes (or reads): the wait returns when that grid has completed and
// its memory operations are visible. Its launch latency and prologue overlap the earlier
// kernel's tail (~1-2 us per launch next to a 40-us decode step). Before sm90, and when the
// kernel was launched without the attribute, both are no-ops and stream order is as usual.
#pragma once

namespace flashkit::cuda::ptx {

__device__ __forceinline__ void launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void wait_for_prior_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

}  // namespace flashkit::cuda::ptx
