// TMA (ptx/tma.cuh + common/tensor_map.cpp): boxes loaded into shared memory land exactly where
// ptx::swizzled_offset says (the layout wgmma descriptors assume), elements outside the tensor
// read as zero (also at negative coordinates), the mbarrier's expect_tx accounting completes the
// phase, ranks 2 and 4 both work, and stores write the box clipped to the tensor.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cuda/common/tensor_map.hpp"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/tma.cuh"
#include "cuda/ptx/warpgroup.cuh"
#include "gpu_check.hpp"
#include "sm90_tile.cuh"

namespace flashkit::testing {
namespace {

namespace ptx = cuda::ptx;
using ptx::Swizzle;

struct Box {
  int coords[5];
  int rows;       // product of the box's outer extents
  int row_elems;  // box[0]
  Swizzle swizzle;
};

template <int kRank>
__global__ void load_box(const __grid_constant__ CUtensorMap map, Box box, std::uint16_t* out) {
  extern __shared__ unsigned char raw[];
  unsigned char* tile = aligned_smem(raw);
  __shared__ std::uint64_t full;
  const int bytes = box.rows * box.row_elems * 2;
  if (threadIdx.x == 0) {
    ptx::tma_prefetch_descriptor(map);
    ptx::mbarrier_init(&full, 1);
    ptx::mbarrier_init_fence();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int c[kRank];
    for (int i = 0; i < kRank; ++i) c[i] = box.coords[i];
    ptx::mbarrier_arrive_expect_tx(&full, bytes);
    ptx::tma_load<kRank>(tile, map, &full, c);
  }
  ptx::mbarrier_wait(&full, 0);
  const int span = ptx::swizzle_span_bytes(box.swizzle);
  for (int i = threadIdx.x; i < box.rows * box.row_elems; i += blockDim.x) {
    const int r = i / box.row_elems, e = i % box.row_elems;
    out[i] = *reinterpret_cast<const std::uint16_t*>(
        tile + ptx::swizzled_offset(r * span + e * 2, box.swizzle));
  }
}

// Distinct 16-bit patterns (the copy moves bits; none is zero, so zero fill is visible).
std::vector<std::uint16_t> pattern(std::size_t n) {
  std::vector<std::uint16_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint16_t>(1 + i % 60000);
  return v;
}

template <int kRank>
std::vector<std::uint16_t> run_load(const cuda::TensorMapSpec& spec, const Box& box) {
  const CUtensorMap map = cuda::make_tensor_map(spec);
  DeviceArray<std::uint16_t> out(box.rows * box.row_elems);
  const int smem = box.rows * box.row_elems * 2 + 1024;
  cudaFuncSetAttribute(load_box<kRank>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  load_box<kRank><<<1, 128, smem>>>(map, box, out.get());
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return out.to_host();
}

struct Load2d {
  int rows, cols;  // the tensor, row-major
  int box_rows, box_cols, row0, col0;
  Swizzle swizzle;
};

class TmaLoad2d : public ::testing::TestWithParam<Load2d> {};

TEST_P(TmaLoad2d, BoxLandsInTheSwizzledLayoutWithZerosOutside) {
  const Load2d c = GetParam();
  const auto host = pattern(static_cast<std::size_t>(c.rows) * c.cols);
  DeviceArray<std::uint16_t> global(host);
  cuda::TensorMapSpec spec;
  spec.base = global.get();
  spec.dtype = DType::bf16;
  spec.dims = {static_cast<std::uint64_t>(c.cols), static_cast<std::uint64_t>(c.rows)};
  spec.strides_bytes = {static_cast<std::uint64_t>(c.cols) * 2};
  spec.box = {static_cast<std::uint32_t>(c.box_cols), static_cast<std::uint32_t>(c.box_rows)};
  spec.swizzle = c.swizzle;
  const Box box{{c.col0, c.row0}, c.box_rows, c.box_cols, c.swizzle};
  const auto got = run_load<2>(spec, box);
  int bad = 0;
  for (int r = 0; r < c.box_rows; ++r) {
    for (int e = 0; e < c.box_cols; ++e) {
      const int gr = c.row0 + r, gc = c.col0 + e;
      const bool inside = gr >= 0 && gr < c.rows && gc >= 0 && gc < c.cols;
      const std::uint16_t want = inside ? host[gr * c.cols + gc] : 0;
      if (got[r * c.box_cols + e] != want && ++bad <= 5) {
        ADD_FAILURE() << "box (" << r << ", " << e << "): got " << got[r * c.box_cols + e]
                      << ", want " << want;
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

INSTANTIATE_TEST_SUITE_P(
    All, TmaLoad2d,
    ::testing::Values(Load2d{100, 200, 64, 64, 64, 128, Swizzle::b128},  // rows past the end
                      Load2d{100, 200, 32, 32, 80, 176, Swizzle::b64},   // both edges
                      Load2d{100, 200, 8, 16, 0, 0, Swizzle::b32},
                      Load2d{100, 200, 64, 64, -8, 0, Swizzle::b128}));  // negative start row

TEST(TmaLoad4d, OneHeadOfABatchSeqHeadDimTensor) {
  // q/k/v as [batch 2][seq 70][heads 3][d 64]: the box is 32 positions of head 2 of sequence 1,
  // from position 48, so 70..79 are past the end.
  const int b = 2, n = 70, h = 3, d = 64;
  const auto host = pattern(static_cast<std::size_t>(b) * n * h * d);
  DeviceArray<std::uint16_t> global(host);
  cuda::TensorMapSpec spec;
  spec.base = global.get();
  spec.dtype = DType::bf16;
  spec.dims = {static_cast<std::uint64_t>(d), static_cast<std::uint64_t>(h),
               static_cast<std::uint64_t>(n), static_cast<std::uint64_t>(b)};
  spec.strides_bytes = {std::uint64_t(d) * 2, std::uint64_t(h) * d * 2,
                        std::uint64_t(n) * h * d * 2};
  spec.box = {64, 1, 32, 1};
  spec.swizzle = Swizzle::b128;
  const Box box{{0, 2, 48, 1}, 32, 64, Swizzle::b128};
  const auto got = run_load<4>(spec, box);
  for (int r = 0; r < 32; ++r) {
    for (int e = 0; e < d; ++e) {
      const int pos = 48 + r;
      const std::uint16_t want = pos < n ? host[((1 * n + pos) * h + 2) * d + e] : 0;
      ASSERT_EQ(got[r * d + e], want) << "position " << pos << " element " << e;
    }
  }
}

__global__ void store_box(const __grid_constant__ CUtensorMap map, const std::uint16_t* src,
                          int col0, int row0) {
  extern __shared__ unsigned char raw[];
  unsigned char* tile = aligned_smem(raw);
  for (int i = threadIdx.x; i < 64 * 64; i += blockDim.x) {
    *reinterpret_cast<std::uint16_t*>(tile + ptx::swizzled_offset(i * 2, Swizzle::b128)) = src[i];
  }
  ptx::fence_proxy_async();
  __syncthreads();
  if (threadIdx.x == 0) {
    const int c[2] = {col0, row0};
    ptx::tma_store<2>(map, tile, c);
    ptx::tma_store_commit();
    ptx::tma_store_wait<0>();
  }
}

TEST(TmaStore2d, WritesTheBoxClippedToTheTensor) {
  const int rows = 100, cols = 200, row0 = 64, col0 = 160;
  const std::uint16_t poison = 0xFFFF;
  DeviceArray<std::uint16_t> global(std::vector<std::uint16_t>(rows * cols, poison));
  const auto src = pattern(64 * 64);
  DeviceArray<std::uint16_t> dsrc(src);
  cuda::TensorMapSpec spec;
  spec.base = global.get();
  spec.dtype = DType::bf16;
  spec.dims = {cols, rows};
  spec.strides_bytes = {cols * 2};
  spec.box = {64, 64};
  spec.swizzle = Swizzle::b128;
  const CUtensorMap map = cuda::make_tensor_map(spec);
  const int smem = 64 * 64 * 2 + 1024;
  FLASHKIT_CUDA_OK(
      cudaFuncSetAttribute(store_box, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  store_box<<<1, 128, smem>>>(map, dsrc.get(), col0, row0);
  FLASHKIT_CUDA_OK(cudaGetLastError());
  FLASHKIT_CUDA_OK(cudaDeviceSynchronize());
  const auto got = global.to_host();
  int bad = 0;
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      const bool in_box = r >= row0 && r < row0 + 64 && c >= col0 && c < col0 + 64;
      const std::uint16_t want = in_box ? src[(r - row0) * 64 + (c - col0)] : poison;
      if (got[r * cols + c] != want && ++bad <= 5) {
        ADD_FAILURE() << "(" << r << ", " << c << "): got " << got[r * cols + c] << ", want "
                      << want;
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

}  // namespace
}  // namespace flashkit::testing
