// The sm90 forward's K/V source for cache pages of <= 16 tokens (fwd_kv_source.cuh has the other
// sources and what they share): every row of a block is copied with cp.async by the producer
// warpgroup's 128 threads, into the 128-byte swizzled layout a TMA box would have left, so the
// consumers read it unchanged.
//
// Why not TMA boxes of one page each (PagedSource) there: at pages of 16 a 128-key block is 8
// boxes per 64-column slab, 32 TMA copies for K and V, and the block took 3.1-3.3 us against
// 1.85 with one box per slab (pages of >= 128; H200, paged prefill at 4096 cached tokens,
// docs/kernels/cascade.md, v7). Rows by cp.async take ~2.9 us whatever the page size: faster
// than small boxes, slower than large ones, so the host takes this source for pages of <= 16.
#pragma once

#include <cstdint>

#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/sm90/fwd_kv_source.cuh"
#include "cuda/sm90/fwd_maps.hpp"

namespace flashkit::cuda::sm90 {

struct PagedRowSource : PagedSourceCommon {
  // Each producer thread arrives on a stage's full barrier once its copies have landed
  // (cp.async's own arrival); the consumers fence the proxies after their wait, since cp.async
  // writes through the generic proxy and wgmma reads through the async one.
  static constexpr int kProducerThreads = 128;
  static constexpr bool kKvThroughGenericProxy = true;

  // Block n of K (or V) into a stage, by producer thread `thread` (0..127): 16-byte chunk
  // `thread % kChunks` of rows r0, r0 + kRowsPerPass, ... Each row's page id is read once per
  // warp, by the lane that the row's pass and place in the warp name, and passed on with a
  // shuffle: one read latency per block instead of one per row (a block's ids are in one or two
  // 128-byte lines). Strides, and a head's offset, fit 31 bits (cuda/paged_fwd.cpp checks and
  // sends other calls to the sm80 kernel), so each row's address is two 32 x 32 -> 64-bit
  // multiply-adds.
  template <class T>
  __device__ __forceinline__ void load_kv(unsigned char* dst, const FwdMaps&, KvOperand op,
                                          std::uint64_t* bar, const Keys& k, int n, ProducerFix*,
                                          int thread) const {
    constexpr int kChunks = T::kSlabs * T::kSlabBytesPerRow / 16;  // per row: d 128 -> 16
    constexpr int kWarpRows = 32 / kChunks;                        // rows a warp covers a pass
    constexpr int kRowsPerPass = kProducerThreads / kChunks;
    constexpr int kPasses = T::kBlockN / kRowsPerPass;
    static_assert(kChunks <= 32 && T::kBlockN % kRowsPerPass == 0, "whole rows per pass");
    static_assert(kPasses * kWarpRows <= 32, "a row id per lane: blocks of <= 128 keys");
    const int lane = thread % 32;
    const int chunk = thread % kChunks;
    const int r0 = (thread / 32) * kWarpRows + lane / kChunks;  // this thread's row in pass 0
    const int key0 = k.first + n * T::kBlockN;
    // Lane l reads the page of the row at pass l / kWarpRows, place l % kWarpRows in the warp.
    int page = 0;
    {
      const int key =
          key0 + (lane / kWarpRows) * kRowsPerPass + (r0 - lane / kChunks) + lane % kWarpRows;
      if (lane < kPasses * kWarpRows && key < k.seq_len) {
        page = k.table[(key >> kv.page_shift) * int(kv.table_page)];
      }
    }
    const bool is_k = op == KvOperand::k;
    const int page_stride = int(is_k ? kv.k_page_stride : kv.v_page_stride);
    const int slot_stride = int(is_k ? kv.k_slot_stride : kv.v_slot_stride);
    const int head_stride = int(is_k ? kv.k_head_stride : kv.v_head_stride);
    const auto* chunk_base = static_cast<const std::uint16_t*>(is_k ? kv.k_pages : kv.v_pages) +
                             (k.head_kv * head_stride + chunk * 8);  // 8 elements per chunk
    const int slot_mask = (1 << kv.page_shift) - 1;
    // The 128-byte swizzle of a TMA box: 16-byte unit u of row r lands at u ^ (r % 8). Rows of
    // pass j are r0 + j * kRowsPerPass, a multiple of 4 apart, so r % 8 is r0 % 8 with bit 2
    // flipped on odd passes when kRowsPerPass is 4 (d 256), and r0 % 8 on every pass otherwise.
    static_assert(kRowsPerPass % 4 == 0, "a pass's rows keep their swizzle up to bit 2");
    const int slab = chunk / 8, unit = chunk % 8;
    const std::uint32_t row0_at =
        ptx::smem_address(dst) + std::uint32_t(slab * T::kBlockN + r0) * T::kSlabBytesPerRow;
    const std::uint32_t even_at = row0_at + std::uint32_t((unit ^ (r0 & 7)) * 16);
    const std::uint32_t odd_at = row0_at + std::uint32_t((unit ^ (r0 & 7) ^ 4) * 16);
#pragma unroll
    for (int j = 0; j < kPasses; ++j) {
      const int key = key0 + r0 + j * kRowsPerPass;
      const int row_page = __shfl_sync(0xffffffffu, page, j * kWarpRows + lane / kChunks);
      // A row past the keys copies nothing (zero fill) from an address that exists: its page
      // id is 0.
      const std::uint16_t* src = chunk_base + std::int64_t(row_page) * page_stride +
                                 std::int64_t(key & slot_mask) * slot_stride;
      const bool flipped = kRowsPerPass % 8 != 0 && j % 2 == 1;
      const std::uint32_t to =
          (flipped ? odd_at : even_at) + std::uint32_t(j * kRowsPerPass * T::kSlabBytesPerRow);
      ptx::cp_async_16(to, src, key < k.seq_len);
    }
    ptx::cp_async_mbarrier_arrive(bar);
  }
};

}  // namespace flashkit::cuda::sm90
