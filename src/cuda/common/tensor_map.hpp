// TMA tensor maps (sm90), encoded on the host: the descriptor a kernel takes by value as a
// `const __grid_constant__ CUtensorMap` and hands to ptx::tma_load / tma_store.
//
// The driver's encoder is reached through the runtime's entry-point lookup, so the library needs
// no link against libcuda. Every limit the driver would reject is checked first and reported as
// flashkit::Error naming the argument.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <vector>

#include "cuda/ptx/smem_desc.hpp"
#include "flashkit/tensor.hpp"

namespace flashkit::cuda {

struct TensorMapSpec {
  const void* base = nullptr;  // 16-byte aligned global address
  DType dtype = DType::bf16;
  // Innermost dimension first: extents, byte strides of dims 1.. (dim 0 is contiguous), and the
  // box (elements copied per dimension, each 1..256). box[0] * element size must fit the swizzle
  // span (128 / 64 / 32 bytes) when swizzled.
  std::vector<std::uint64_t> dims;
  std::vector<std::uint64_t> strides_bytes;
  std::vector<std::uint32_t> box;
  ptx::Swizzle swizzle = ptx::Swizzle::b128;
};

CUtensorMap make_tensor_map(const TensorMapSpec& spec);

}  // namespace flashkit::cuda
