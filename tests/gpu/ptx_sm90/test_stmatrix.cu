// stmatrix .x4 (ptx/stmatrix.cuh): which register of which lane lands in which element of which
// 8x8 tile, and that each row goes where its own lane's address points.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/stmatrix.cuh"
#include "gpu_check.hpp"

namespace flashkit::testing {
namespace {

constexpr int kRows = 32;  // 4 tiles x 8 rows, 8 16-bit elements each
constexpr std::uint16_t kPoison = 0xdead;

// Where row r of tile i goes: a permutation of the 32 rows (5 is odd, so coprime with 32), so a
// lane whose address were ignored or swapped with another's would put its row elsewhere.
__device__ __host__ constexpr int row_slot(int tile, int row) {
  return (tile * 8 + row) * 5 % kRows;
}

// Lane L gives, in register i, the values i * 64 + (L / 4) * 8 + 2 (L % 4) and the next one:
// element (L / 4, 2 (L % 4)) of tile i and its right neighbour, as a row-major index.
__global__ void store_tiles(std::uint16_t* out) {
  __shared__ __align__(16) std::uint16_t rows[kRows * 8];
  const int lane = threadIdx.x;
  for (int i = lane; i < kRows * 8; i += 32) rows[i] = kPoison;
  __syncwarp();
  std::uint32_t r[4];
  for (int i = 0; i < 4; ++i) {
    const std::uint32_t lo = i * 64 + (lane / 4) * 8 + 2 * (lane % 4);
    r[i] = lo | ((lo + 1) << 16);
  }
  const std::uint32_t row_addr = cuda::ptx::smem_address(&rows[row_slot(lane / 8, lane % 8) * 8]);
  cuda::ptx::stmatrix_x4(row_addr, r);
  __syncwarp();
  for (int i = lane; i < kRows * 8; i += 32) out[i] = rows[i];
}

TEST(PtxStmatrix, X4PutsEachLanesPairsInItsTilesRowsAtTheLanesAddresses) {
  DeviceArray<std::uint16_t> out(kRows * 8);
  store_tiles<<<1, 32>>>(out.get());
  FLASHKIT_CUDA_OK(cudaGetLastError());
  FLASHKIT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<std::uint16_t> got = out.to_host();
  for (int tile = 0; tile < 4; ++tile) {
    for (int row = 0; row < 8; ++row) {
      for (int col = 0; col < 8; ++col) {
        EXPECT_EQ(got[row_slot(tile, row) * 8 + col], tile * 64 + row * 8 + col)
            << "tile " << tile << " row " << row << " col " << col;
      }
    }
  }
}

}  // namespace
}  // namespace flashkit::testing
