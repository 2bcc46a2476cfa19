// e4m3 <-> float for the paged KV cache, host and device (the host side is what the cpu-labelled
// test checks, and it is the same code sm80 runs).
//
// Decoding: sm89+ has cvt.rn.f16x2.e4m3x2, two values per instruction. Below that, e4m3 is f16
// with a 4-bit exponent: moving s.eeee.mmm into f16's fields (sign to bit 15, eeee.mmm to bits
// 13..7) gives the value times 2^-8 exactly, subnormals included (f16 bias 15 vs 7), and a
// multiply by 256 restores it. The NaN codes 0x7f / 0xff decode to +-480 there, not NaN (a cache
// holding NaN is already broken).
//
// Encoding: cuda_fp8.h's __nv_cvt_float_to_fp8 with __NV_SATFINITE, which is the
// cvt.rn.satfinite.e4m3x2.f32 instruction on sm89+ and an equivalent software rounding on sm80
// and on the host: round to nearest even, |x| >= 448 and +-inf saturate to +-448, NaN stays NaN.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace flashkit::cuda::decode {

// The four e4m3 values of `w`, lowest byte first (memory order), as floats.
__host__ __device__ __forceinline__ void e4m3x4_to_float(std::uint32_t w, float* out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  for (int i = 0; i < 2; ++i) {
    const __half2_raw h =
        __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(w >> (16 * i)), __NV_E4M3);
    const float2 f = __half22float2(__half2(h));
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
#else
  for (int i = 0; i < 4; ++i) {
    const std::uint32_t b = (w >> (8 * i)) & 0xffu;
    __half_raw h;
    h.x = static_cast<unsigned short>(((b & 0x80u) << 8) | ((b & 0x7fu) << 7));
    out[i] = __half2float(__half(h)) * 256.0f;
  }
#endif
}

// Two e4m3 values (the low 16 bits of `w`, lowest byte first) as an f16x2 register, lowest
// first, without the sm89 instruction: per half, s.eeee.mmm moves to f16's s at 15 and
// eeee.mmm at 13..7 (the value times 2^-8, exactly), then one f16x2 multiply by 256.
__device__ __forceinline__ std::uint32_t e4m3x2_to_f16x2_by_bits(std::uint32_t w) {
  const std::uint32_t spread = __byte_perm(w, 0, 0x1404);  // byte 0 -> bits 15..8, 1 -> 31..24
  const std::uint32_t bits = (spread & 0x80008000u) | ((spread >> 1) & 0x3f803f80u);
  __half2 h = *reinterpret_cast<const __half2*>(&bits);
  h = __hmul2(h, __float2half2_rn(256.0f));
  return *reinterpret_cast<const std::uint32_t*>(&h);
}

// The same with one cvt.rn.f16x2.e4m3x2 on sm89+: exact (every e4m3 value is an f16), what
// the tensor-core kernel feeds mma.sync. (The NaN codes give 480 by bits, NaN by cvt.)
__device__ __forceinline__ std::uint32_t e4m3x2_to_f16x2(std::uint32_t w) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  std::uint32_t r;
  asm("{\n .reg .b16 pair;\n cvt.u16.u32 pair, %1;\n cvt.rn.f16x2.e4m3x2 %0, pair;\n}\n"
      : "=r"(r)
      : "r"(w));
  return r;
#else
  return e4m3x2_to_f16x2_by_bits(w);
#endif
}

// The four e4m3 values of `w` as two f16x2 registers, bytes (0, 1) in `lo` and (2, 3) in `hi`.
// On sm89+ the cvt names each 16-bit half of w as its own operand, which ptxas turns into the
// conversion's half selector (F2FP ... R.H1): no shift to bring bytes 2 and 3 down first.
__device__ __forceinline__ void e4m3x4_to_f16x2(std::uint32_t w, std::uint32_t& lo,
                                                std::uint32_t& hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n"
      " cvt.rn.f16x2.e4m3x2 %1, h;\n}\n"
      : "=r"(lo), "=r"(hi)
      : "r"(w));
#else
  lo = e4m3x2_to_f16x2_by_bits(w);
  hi = e4m3x2_to_f16x2_by_bits(w >> 16);
#endif
}

__host__ __device__ __forceinline__ std::uint8_t float_to_e4m3(float x) {
  return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
}

}  // namespace flashkit::cuda::decode
