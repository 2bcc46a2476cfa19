// Shared pieces of the Hopper primitive tests: a 1024-byte aligned view of dynamic shared memory
// (the 128-byte swizzle atom; wgmma descriptors and TMA boxes assume tiles start on one) and
// host conversions of random f16/bf16 inputs.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <random>
#include <type_traits>
#include <vector>

#include "cuda/ptx/cp_async.cuh"

namespace flashkit::testing {

// Dynamic shared memory rounded up to 1024 bytes; launches add 1024 bytes of slack.
__device__ inline unsigned char* aligned_smem(unsigned char* raw) {
  const std::uint32_t a = cuda::ptx::smem_address(raw);
  return raw + (((a + 1023u) & ~1023u) - a);
}

template <typename Elem>
float to_float(Elem x) {
  if constexpr (std::is_same_v<Elem, __half>) {
    return __half2float(x);
  } else {
    return __bfloat162float(x);
  }
}

template <typename Elem>
std::vector<Elem> random_elems(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<Elem> v(n);
  for (auto& x : v) {
    if constexpr (std::is_same_v<Elem, __half>) {
      x = __float2half_rn(dist(rng));
    } else {
      x = __float2bfloat16_rn(dist(rng));
    }
  }
  return v;
}

}  // namespace flashkit::testing
