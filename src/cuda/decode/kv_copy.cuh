// One lane's K/V row pieces on their way to registers: cp.async copies into the lane's own slots
// of its warp's shared-memory ring (16-byte pieces, 4-byte e4m3 scales), and the conversion of a
// piece to floats. A lane only ever reads slots it filled itself, so a cp.async.wait_group is
// all the synchronisation the ring needs: shared memory here holds loads in flight without
// holding registers, it is not shared.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "cuda/decode/fp8_codec.cuh"

namespace flashkit::cuda::decode {

// Copies 4 bytes (an e4m3 page scale) from global `src` to shared `dst`; zeros when !valid.
// (.ca: 4-byte copies cannot bypass L1; a page's scale is read by every row of the page.)
__device__ __forceinline__ void cp_async_4(std::uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}

// The 16 / sizeof(KvElem) elements of a piece as floats, in memory order.
template <class KvElem>
__device__ __forceinline__ void unpack_piece(const uint4& v, float* out) {
  const std::uint32_t w[4] = {v.x, v.y, v.z, v.w};
  if constexpr (std::is_same_v<KvElem, __nv_fp8_e4m3>) {
#pragma unroll
    for (int i = 0; i < 4; ++i) e4m3x4_to_float(w[i], out + 4 * i);
  } else if constexpr (std::is_same_v<KvElem, __nv_bfloat16>) {
    // bf16 is the top half of an f32: a shift or a mask, no conversion instruction.
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out[2 * i] = __uint_as_float(w[i] << 16);
      out[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  } else {
    static_assert(std::is_same_v<KvElem, __half>, "f16, bf16 or e4m3 pages");
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      __half2_raw raw;
      raw.x = static_cast<unsigned short>(w[i] & 0xffffu);
      raw.y = static_cast<unsigned short>(w[i] >> 16);
      const float2 f = __half22float2(__half2(raw));
      out[2 * i] = f.x;
      out[2 * i + 1] = f.y;
    }
  }
}

}  // namespace flashkit::cuda::decode
