// flashkit's scratch pool (cuda/common/stream_buffer.hpp): freed scratch stays reserved across a
// synchronisation, so the next call of the same size maps nothing new (the device's default pool,
// whose release threshold is 0, is what it replaces); flashkit::scratch_memory reports it and
// release_scratch_memory hands it back.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>

#include "cuda/common/stream_buffer.hpp"
#include "flashkit/memory.hpp"

namespace flashkit::testing {
namespace {

std::uint64_t pool_attribute(cudaMemPool_t pool, cudaMemPoolAttr attr) {
  std::uint64_t value = 0;
  EXPECT_EQ(cudaMemPoolGetAttribute(pool, attr, &value), cudaSuccess);
  return value;
}

TEST(ScratchPool, KeepsFreedScratchAcrossASynchronisation) {
  constexpr std::size_t kBytes = std::size_t(64) << 20;  // the naive S of N = 4096, one head
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  const cudaMemPool_t pool = cuda::scratch_pool();
  EXPECT_EQ(pool_attribute(pool, cudaMemPoolAttrReleaseThreshold),
            cuda::kScratchKeepBytesPerDevice);
  {
    const cuda::StreamBuffer first(kBytes, stream);
    ASSERT_NE(first.as<void>(), nullptr);
  }
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_GE(pool_attribute(pool, cudaMemPoolAttrReservedMemCurrent), kBytes);
  EXPECT_EQ(pool_attribute(pool, cudaMemPoolAttrUsedMemCurrent), 0u);

  const std::uint64_t reserved = pool_attribute(pool, cudaMemPoolAttrReservedMemCurrent);
  {
    const cuda::StreamBuffer second(kBytes, stream);
    ASSERT_NE(second.as<void>(), nullptr);
  }
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(pool_attribute(pool, cudaMemPoolAttrReservedMemCurrent), reserved);  // reused
  EXPECT_EQ(cuda::scratch_pool(), pool);  // one pool per device
  EXPECT_EQ(flashkit::scratch_memory().reserved_bytes, reserved);
  EXPECT_EQ(flashkit::scratch_memory().keep_bytes, cuda::kScratchKeepBytesPerDevice);

  flashkit::release_scratch_memory();
  EXPECT_EQ(pool_attribute(pool, cudaMemPoolAttrReservedMemCurrent), 0u);
  EXPECT_EQ(flashkit::scratch_memory().reserved_bytes, 0u);
  {
    const cuda::StreamBuffer again(kBytes, stream);  // the pool still serves after a release
    ASSERT_NE(again.as<void>(), nullptr);
  }
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_GE(flashkit::scratch_memory().reserved_bytes, kBytes);
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

TEST(ScratchPool, ZeroBytesAllocateNothing) {
  const cuda::StreamBuffer none(0, nullptr);
  EXPECT_EQ(none.as<void>(), nullptr);
}

}  // namespace
}  // namespace flashkit::testing
