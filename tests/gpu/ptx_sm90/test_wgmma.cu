// wgmma.mma_async (ptx/wgmma.cuh): one warpgroup multiplies A [64 x K] by B [K x N] from operands
// that plain threads placed in shared memory with ptx::swizzled_offset, through descriptors built
// by ptx::smem_desc, against a host matmul of the same rounded inputs. Covers the three swizzle
// spans, K-major and N-major B, shared-memory and register A, several N, and scale_d = 0
// overwriting whatever the accumulators held.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "cuda/ptx/warpgroup.cuh"
#include "cuda/ptx/wgmma.cuh"
#include "gpu_check.hpp"
#include "sm90_tile.cuh"

namespace flashkit::testing {
namespace {

namespace ptx = cuda::ptx;
using ptx::Swizzle;

constexpr int kM = 64;

template <typename Elem, int kN, int kK, Swizzle kSw, int kTransB, bool kRegisterA>
struct Case {
  using T = Elem;
  static constexpr int N = kN, K = kK, TransB = kTransB;
  static constexpr Swizzle Sw = kSw;
  static constexpr bool RegisterA = kRegisterA;
  static constexpr int kSpan = ptx::swizzle_span_bytes(kSw);
  static constexpr int kSpanElems = kSpan / 2;
  // K-major operand [rows x K]: K is cut into span-wide slabs, each slab rows x span bytes.
  __host__ __device__ static std::uint32_t k_major(int row, int k, int rows) {
    const int slab = k / kSpanElems;
    const std::uint32_t linear = slab * rows * kSpan + row * kSpan + (k % kSpanElems) * 2;
    return ptx::swizzled_offset(linear, kSw);
  }
  // N-major B [K x N]: N is cut into span-wide slabs, each slab K x span bytes.
  __host__ __device__ static std::uint32_t n_major(int k, int n) {
    const int slab = n / kSpanElems;
    const std::uint32_t linear = slab * kK * kSpan + k * kSpan + (n % kSpanElems) * 2;
    return ptx::swizzled_offset(linear, kSw);
  }
  static constexpr int kABytes = kM * kK * 2;
  static constexpr int kBBytes = kN * kK * 2;
  static constexpr int kSmemBytes = kABytes + kBBytes + 1024;
};

// a: [64 x K] row-major; b: [N x K] row-major (K-major B) or [K x N] (N-major B); d: [64 x N].
template <class C>
__global__ void __launch_bounds__(128)
    one_warpgroup(const typename C::T* a, const typename C::T* b, float* d) {
  using Elem = typename C::T;
  extern __shared__ unsigned char raw[];
  unsigned char* smem = aligned_smem(raw);
  Elem* sa = reinterpret_cast<Elem*>(smem);
  Elem* sb = reinterpret_cast<Elem*>(smem + C::kABytes);
  const int tid = threadIdx.x;
  for (int i = tid; i < kM * C::K; i += 128) {
    sa[C::k_major(i / C::K, i % C::K, kM) / 2] = a[i];
  }
  for (int i = tid; i < C::N * C::K; i += 128) {
    if constexpr (C::TransB == 0) {
      sb[C::k_major(i / C::K, i % C::K, C::N) / 2] = b[i];
    } else {
      sb[C::n_major(i / C::N, i % C::N) / 2] = b[i];
    }
  }
  ptx::fence_proxy_async();
  __syncthreads();

  const int warp = tid / 32, g = (tid % 32) / 4, t = tid % 4;
  float acc[C::N / 2];
  for (float& x : acc) x = 12345.0f;  // scale_d = 0 on the first k step must discard this
  const std::uint32_t a_base = ptx::smem_address(sa), b_base = ptx::smem_address(sb);
  ptx::warpgroup_fence_operands(acc);
  ptx::wgmma_fence();
#pragma unroll
  for (int s = 0; s < C::K / 16; ++s) {
    const int k0 = s * 16;
    // Start of this k16 step: its slab, then 32 bytes per step inside the span.
    const std::uint32_t k_offset = (k0 / C::kSpanElems) * kM * C::kSpan + (k0 % C::kSpanElems) * 2;
    std::uint64_t desc_b;
    if constexpr (C::TransB == 0) {
      const std::uint32_t kb = (k0 / C::kSpanElems) * C::N * C::kSpan + (k0 % C::kSpanElems) * 2;
      desc_b = ptx::smem_desc(b_base + kb, 16, 8 * C::kSpan, C::Sw);
    } else {
      desc_b = ptx::smem_desc(b_base + k0 * C::kSpan, C::K * C::kSpan, 8 * C::kSpan, C::Sw);
    }
    if constexpr (C::RegisterA) {
      auto pair = [&](int row, int col) {
        __align__(4) Elem two[2] = {a[row * C::K + col], a[row * C::K + col + 1]};
        return *reinterpret_cast<const std::uint32_t*>(two);
      };
      const int r = 16 * warp + g, c = k0 + 2 * t;
      const std::uint32_t af[4] = {pair(r, c), pair(r + 8, c), pair(r, c + 8), pair(r + 8, c + 8)};
      ptx::wgmma_rs<Elem, C::N, C::TransB>(acc, af, desc_b, s > 0);
    } else {
      const std::uint64_t desc_a = ptx::smem_desc(a_base + k_offset, 16, 8 * C::kSpan, C::Sw);
      ptx::wgmma_ss<Elem, C::N, 0, C::TransB>(acc, desc_a, desc_b, s > 0);
    }
  }
  ptx::wgmma_commit();
  ptx::wgmma_wait<0>();
  ptx::warpgroup_fence_operands(acc);
  for (int j = 0; j < C::N / 8; ++j) {
    const int row = 16 * warp + g, col = 8 * j + 2 * t;
    d[row * C::N + col] = acc[4 * j];
    d[row * C::N + col + 1] = acc[4 * j + 1];
    d[(row + 8) * C::N + col] = acc[4 * j + 2];
    d[(row + 8) * C::N + col + 1] = acc[4 * j + 3];
  }
}

template <class C>
void check_case() {
  using Elem = typename C::T;
  const auto a = random_elems<Elem>(kM * C::K, 11);
  const auto b = random_elems<Elem>(C::N * C::K, 12);
  DeviceArray<Elem> da(a), db(b);
  DeviceArray<float> dd(kM * C::N);
  FLASHKIT_CUDA_OK(cudaFuncSetAttribute(
      one_warpgroup<C>, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes));
  one_warpgroup<C><<<1, 128, C::kSmemBytes>>>(da.get(), db.get(), dd.get());
  FLASHKIT_CUDA_OK(cudaGetLastError());
  FLASHKIT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> d = dd.to_host();
  int bad = 0;
  for (int i = 0; i < kM; ++i) {
    for (int j = 0; j < C::N; ++j) {
      double want = 0;
      for (int k = 0; k < C::K; ++k) {
        const float bk = C::TransB == 0 ? to_float(b[j * C::K + k]) : to_float(b[k * C::N + j]);
        want += double(to_float(a[i * C::K + k])) * bk;
      }
      // Products of 16-bit values are exact in fp32; only the K-term fp32 sum rounds.
      if (std::abs(d[i * C::N + j] - want) > 1e-4 && ++bad <= 5) {
        ADD_FAILURE() << "D[" << i << "][" << j << "] = " << d[i * C::N + j] << ", want " << want;
      }
    }
  }
  EXPECT_EQ(bad, 0) << "elements off";
}

TEST(PtxWgmma, SsBf16KMajor128BTwoSlabs) {
  check_case<Case<__nv_bfloat16, 64, 128, Swizzle::b128, 0, false>>();
}
TEST(PtxWgmma, SsF16KMajor128BN128) {
  check_case<Case<__half, 128, 64, Swizzle::b128, 0, false>>();
}
TEST(PtxWgmma, SsBf16KMajor64B) {
  check_case<Case<__nv_bfloat16, 64, 64, Swizzle::b64, 0, false>>();
}
TEST(PtxWgmma, SsBf16KMajor32B) {
  check_case<Case<__nv_bfloat16, 32, 32, Swizzle::b32, 0, false>>();
}
TEST(PtxWgmma, SsBf16KMajor128BN256) {
  check_case<Case<__nv_bfloat16, 256, 64, Swizzle::b128, 0, false>>();
}
// The d = 128 forward's S = Q K^T over 176-key blocks.
TEST(PtxWgmma, SsBf16KMajor128BN176) {
  check_case<Case<__nv_bfloat16, 176, 128, Swizzle::b128, 0, false>>();
}
TEST(PtxWgmma, SsF16KMajor128BN176) {
  check_case<Case<__half, 176, 64, Swizzle::b128, 0, false>>();
}
// ... and its O += P V with 176 keys as the k extent (11 k16 steps, slabs 176 rows apart).
TEST(PtxWgmma, RsBf16NMajorBLikePV176Keys) {
  check_case<Case<__nv_bfloat16, 128, 176, Swizzle::b128, 1, true>>();
}
// The d = 256 forward's S = Q K^T over 80-key blocks and its O += P V over them (5 k16 steps).
TEST(PtxWgmma, SsBf16KMajor128BN80) {
  check_case<Case<__nv_bfloat16, 80, 256, Swizzle::b128, 0, false>>();
}
TEST(PtxWgmma, RsF16NMajorBLikePV80Keys) {
  check_case<Case<__half, 256, 80, Swizzle::b128, 1, true>>();
}
TEST(PtxWgmma, SsBf16NMajorB128BTwoSlabs) {
  check_case<Case<__nv_bfloat16, 128, 64, Swizzle::b128, 1, false>>();
}
TEST(PtxWgmma, SsF16NMajorB64B) {
  check_case<Case<__half, 64, 32, Swizzle::b64, 1, false>>();
}
TEST(PtxWgmma, RsBf16KMajorB) {
  check_case<Case<__nv_bfloat16, 64, 64, Swizzle::b128, 0, true>>();
}
TEST(PtxWgmma, RsF16NMajorBLikePV) {
  check_case<Case<__half, 128, 64, Swizzle::b128, 1, true>>();
}
TEST(PtxWgmma, RsBf16N96) {
  check_case<Case<__nv_bfloat16, 96, 64, Swizzle::b128, 0, true>>();
}

}  // namespace
}  // namespace flashkit::testing
