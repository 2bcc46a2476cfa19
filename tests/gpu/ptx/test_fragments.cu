// The sm80 operand path end to end on one warp: a tile copied with cp.async into the swizzled
// layout (sm80/smem_copy.cuh), read back with the fragment loaders (sm80/warp_fragments.cuh),
// multiplied with mma.sync: S = Q K^T and O = P V against host matmuls, for row widths of 4, 8
// and 12 units (two strip widths).
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/mma.cuh"
#include "cuda/ptx/swizzle.hpp"
#include "cuda/sm80/smem_copy.cuh"
#include "cuda/sm80/warp_fragments.cuh"
#include "gpu_check.hpp"

namespace flashkit::testing {
namespace {

using Elem = __nv_bfloat16;
constexpr int kRows = 16;

// q, k: [16][D] row-major. s = q k^T [16][16]; o = k^T-as-V: o = q[:, :16] v with v = k [16][D].
template <int kD>
__global__ void qk_and_pv(const Elem* q, const Elem* k, int valid_k_rows, float* s, float* o) {
  using Tile = cuda::ptx::SwizzledTile<kRows, kD / 8>;
  __shared__ __align__(128) unsigned char smem[2 * Tile::kBytes];
  const std::uint32_t q_tile = cuda::ptx::smem_address(smem);
  const std::uint32_t k_tile = q_tile + Tile::kBytes;
  cuda::sm80::copy_tile_async<Tile, 32>(q_tile, q, kD, kRows);
  cuda::sm80::copy_tile_async<Tile, 32>(k_tile, k, kD, valid_k_rows);
  cuda::ptx::cp_async_commit();
  cuda::ptx::cp_async_wait<0>();
  __syncthreads();
  const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
  const int a_lane = cuda::sm80::rows_major_lane<Tile>(lane);
  const int b_lane = cuda::sm80::rows_minor_lane<Tile>(lane);
  float acc[2][4] = {};
  for (int kk = 0; kk < kD / 16; ++kk) {
    std::uint32_t a[4], b[4];
    cuda::sm80::load_a<Tile>(a, q_tile, a_lane, 0, kk * 16);
    cuda::sm80::load_b_from_nk<Tile>(b, k_tile, b_lane, 0, kk * 16);
    cuda::ptx::mma_m16n8k16<Elem>(acc[0], a, b[0], b[1]);
    cuda::ptx::mma_m16n8k16<Elem>(acc[1], a, b[2], b[3]);
  }
  for (int nt = 0; nt < 2; ++nt) {
    s[g * 16 + nt * 8 + 2 * t] = acc[nt][0];
    s[g * 16 + nt * 8 + 2 * t + 1] = acc[nt][1];
    s[(g + 8) * 16 + nt * 8 + 2 * t] = acc[nt][2];
    s[(g + 8) * 16 + nt * 8 + 2 * t + 1] = acc[nt][3];
  }
  // O = Q[:, 0:16] V, V = the K tile read as [k = 16 rows][n = kD]: A from Q (k0 = 0).
  std::uint32_t a[4];
  cuda::sm80::load_a<Tile>(a, q_tile, a_lane, 0, 0);
  for (int dn = 0; dn < kD / 16; ++dn) {
    std::uint32_t b[4];
    cuda::sm80::load_b_from_kn<Tile>(b, k_tile, a_lane, 0, dn * 16);
    float d0[4] = {}, d1[4] = {};
    cuda::ptx::mma_m16n8k16<Elem>(d0, a, b[0], b[1]);
    cuda::ptx::mma_m16n8k16<Elem>(d1, a, b[2], b[3]);
    const float* d[2] = {d0, d1};
    for (int h = 0; h < 2; ++h) {
      const int col = dn * 16 + h * 8 + 2 * t;
      o[g * kD + col] = d[h][0];
      o[g * kD + col + 1] = d[h][1];
      o[(g + 8) * kD + col] = d[h][2];
      o[(g + 8) * kD + col + 1] = d[h][3];
    }
  }
}

template <int kD>
void check_width() {
  SCOPED_TRACE(::testing::Message() << "row width " << kD);
  std::mt19937 rng(kD);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<Elem> q(kRows * kD), k(kRows * kD);
  for (auto& x : q) x = __float2bfloat16_rn(dist(rng));
  for (auto& x : k) x = __float2bfloat16_rn(dist(rng));
  const int valid_k = 13;  // rows 13..15 of K must read as zeros
  DeviceArray<Elem> dq(q), dk(k);
  DeviceArray<float> ds(kRows * kRows), dout(kRows * kD);
  qk_and_pv<kD><<<1, 32>>>(dq.get(), dk.get(), valid_k, ds.get(), dout.get());
  FLASHKIT_CUDA_OK(cudaGetLastError());
  FLASHKIT_CUDA_OK(cudaDeviceSynchronize());
  const auto s = ds.to_host(), o = dout.to_host();
  auto kv = [&](int r, int c) {
    return r < valid_k ? double(__bfloat162float(k[r * kD + c])) : 0.0;
  };
  for (int i = 0; i < kRows; ++i) {
    for (int j = 0; j < kRows; ++j) {
      double want = 0;
      for (int e = 0; e < kD; ++e) want += double(__bfloat162float(q[i * kD + e])) * kv(j, e);
      EXPECT_NEAR(s[i * kRows + j], want, 1e-4) << "S " << i << "," << j;
    }
    for (int c = 0; c < kD; ++c) {
      double want = 0;
      for (int j = 0; j < kRows; ++j) want += double(__bfloat162float(q[i * kD + j])) * kv(j, c);
      EXPECT_NEAR(o[i * kD + c], want, 1e-4) << "O " << i << "," << c;
    }
  }
}

TEST(Sm80Fragments, SwizzledCopyLdmatrixAndMmaAgreeWithHostMatmul) {
  check_width<32>();
  check_width<64>();
  check_width<96>();
}

}  // namespace
}  // namespace flashkit::testing
