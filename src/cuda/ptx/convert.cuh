// Conversions and fast math the kernels do per score element, as single PTX instructions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace flashkit::cuda::ptx {

// Rounds (lo, hi) to two 16-bit values packed in one register, lo in the low half: the order
// mma.sync fragments and 4-byte stores expect. One cvt.rn instruction (sm80+).
template <typename Elem>
__device__ __forceinline__ std::uint32_t pack2(float lo, float hi) {
  std::uint32_t r;
  if constexpr (std::is_same_v<Elem, __half>) {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  } else {
    static_assert(std::is_same_v<Elem, __nv_bfloat16>, "pack2 makes f16x2 or bf16x2");
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  }
  return r;
}

// 2^x in one MUFU instruction (relative error ~2^-22, subnormal results flushed to 0, which only
// touches probabilities below 2^-126 that cannot move an f32 sum of values <= 1 anyway).
__device__ __forceinline__ float exp2_approx(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
  return r;
}

}  // namespace flashkit::cuda::ptx
