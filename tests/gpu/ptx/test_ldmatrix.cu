// ldmatrix .x4 and .x4.trans (ptx/ldmatrix.cuh): which element of which 8x8 tile lands in which
// lane and register.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/ldmatrix.cuh"
#include "gpu_check.hpp"

namespace flashkit::testing {
namespace {

// Four 8x8 tiles of 16-bit values, tile i row-major at [i][8][8]; element value = its index.
// Each lane writes its 4 registers (8 halves) to out[lane][8].
__global__ void load_tiles(bool trans, std::uint16_t* out) {
  __shared__ __align__(16) std::uint16_t tiles[4 * 64];
  const int lane = threadIdx.x;
  for (int i = lane; i < 4 * 64; i += 32) tiles[i] = std::uint16_t(i);
  __syncwarp();
  const std::uint32_t row_addr = cuda::ptx::smem_address(&tiles[(lane / 8) * 64 + (lane % 8) * 8]);
  std::uint32_t r[4];
  if (trans) {
    cuda::ptx::ldmatrix_x4_trans(r, row_addr);
  } else {
    cuda::ptx::ldmatrix_x4(r, row_addr);
  }
  for (int i = 0; i < 4; ++i) {
    out[lane * 8 + 2 * i] = std::uint16_t(r[i] & 0xffff);
    out[lane * 8 + 2 * i + 1] = std::uint16_t(r[i] >> 16);
  }
}

std::vector<std::uint16_t> run(bool trans) {
  DeviceArray<std::uint16_t> out(32 * 8);
  load_tiles<<<1, 32>>>(trans, out.get());
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return out.to_host();
}

TEST(PtxLdmatrix, X4GivesEachLaneTwoColumnsOfItsRow) {
  const auto got = run(false);
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 4; ++i) {
      const int row = lane / 4, col = 2 * (lane % 4);
      EXPECT_EQ(got[lane * 8 + 2 * i], i * 64 + row * 8 + col) << "lane " << lane << " reg " << i;
      EXPECT_EQ(got[lane * 8 + 2 * i + 1], i * 64 + row * 8 + col + 1);
    }
  }
}

TEST(PtxLdmatrix, X4TransGivesEachLaneTwoRowsOfItsColumn) {
  const auto got = run(true);
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 4; ++i) {
      const int col = lane / 4, row = 2 * (lane % 4);
      EXPECT_EQ(got[lane * 8 + 2 * i], i * 64 + row * 8 + col) << "lane " << lane << " reg " << i;
      EXPECT_EQ(got[lane * 8 + 2 * i + 1], i * 64 + (row + 1) * 8 + col);
    }
  }
}

}  // namespace
}  // namespace flashkit::testing
