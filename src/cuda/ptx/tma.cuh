// TMA (sm90): bulk tensor copies between global memory and shared memory, described by a
// CUtensorMap (encoded on the host, common/tensor_map.hpp) and issued by ONE thread. Loads
// complete on an mbarrier (the barrier's expect_tx must announce the box's bytes); stores are
// tracked by bulk groups. Shared-memory tiles land in the map's swizzle pattern
// (ptx::swizzled_offset in wgmma.cuh), ready for wgmma descriptors. Box elements outside the
// tensor read as zero and are not written by stores.
//
// Coordinates are element indices, innermost dimension first (the map's order).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "cuda/ptx/cp_async.cuh"  // smem_address

namespace flashkit::cuda::ptx {

__device__ __forceinline__ std::uint64_t tensor_map_address(const CUtensorMap& map) {
  return reinterpret_cast<std::uint64_t>(&map);
}

// Pulls the descriptor into the constant cache ahead of the first copy.
__device__ __forceinline__ void tma_prefetch_descriptor(const CUtensorMap& map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(tensor_map_address(map)) : "memory");
}

template <int kRank>
__device__ __forceinline__ void tma_load(void* smem_dst, const CUtensorMap& map, std::uint64_t* bar,
                                         const int (&c)[kRank]) {
  const std::uint32_t dst = smem_address(smem_dst), mbar = smem_address(bar);
  const std::uint64_t m = tensor_map_address(map);
  static_assert(kRank >= 2 && kRank <= 5, "tensor maps of rank 2..5");
  if constexpr (kRank == 2) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
        "l"(m), "r"(c[0]), "r"(c[1]), "r"(mbar)
        : "memory");
  } else if constexpr (kRank == 3) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
        "l"(m), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(mbar)
        : "memory");
  } else if constexpr (kRank == 4) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
        "l"(m), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(mbar)
        : "memory");
  } else {
    asm volatile(
        "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3, %4, %5, %6}], [%7];\n" ::"r"(dst),
        "l"(m), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(c[4]), "r"(mbar)
        : "memory");
  }
}

// Shared -> global. The threads that wrote the tile must have run fence_proxy_async() and a
// barrier first (ordinary stores are invisible to the async proxy otherwise).
template <int kRank>
__device__ __forceinline__ void tma_store(const CUtensorMap& map, const void* smem_src,
                                          const int (&c)[kRank]) {
  const std::uint32_t src = smem_address(smem_src);
  const std::uint64_t m = tensor_map_address(map);
  static_assert(kRank >= 2 && kRank <= 5, "tensor maps of rank 2..5");
  if constexpr (kRank == 2) {
    asm volatile(
        "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(
            m),
        "r"(src), "r"(c[0]), "r"(c[1])
        : "memory");
  } else if constexpr (kRank == 3) {
    asm volatile(
        "cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::
            "l"(m),
        "r"(src), "r"(c[0]), "r"(c[1]), "r"(c[2])
        : "memory");
  } else if constexpr (kRank == 4) {
    asm volatile(
        "cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4, %5}], "
        "[%1];\n" ::"l"(m),
        "r"(src), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3])
        : "memory");
  } else {
    asm volatile(
        "cp.async.bulk.tensor.5d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4, %5, %6}], "
        "[%1];\n" ::"l"(m),
        "r"(src), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]), "r"(c[4])
        : "memory");
  }
}

// Closes the bulk group of the stores issued since the last commit.
__device__ __forceinline__ void tma_store_commit() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

// Waits until at most kPending store groups still READ their shared memory (the tile may be
// overwritten then; the global writes may still be in flight).
template <int kPending>
__device__ __forceinline__ void tma_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
}

// Waits until at most kPending store groups are incomplete (their global writes done).
template <int kPending>
__device__ __forceinline__ void tma_store_wait() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(kPending) : "memory");
}

}  // namespace flashkit::cuda::ptx
