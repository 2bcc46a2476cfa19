// FLASHKIT_HD marks helpers that CUDA kernels and the CPU backend share (mask rules, the
// online-softmax state), so both sides compute the same thing from one definition.
#pragma once

#if defined(__CUDACC__)
#define FLASHKIT_HD __host__ __device__ __forceinline__
#else
#define FLASHKIT_HD inline
#endif
