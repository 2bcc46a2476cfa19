// The sm90 forward's K/V source for cache pages of <= 16 tokens (fwd_kv_source.cuh has the other
// sources and what they share): every row of a block is copied with cp.async by the producer
// warpgroup's 128 threads, into the 128-byte swizzled layout a TMA box would have left, so the
// consumers read it unchanged.
//
// Why not TMA boxes of one page each (PagedSource) there: at pages of 16 a 128-key block is 8
// boxes per 64-column slab, 32 TMA copies for K and V, and the block took 3.1-3.3 us against
// 1.85 with one box per slab (pages of >= 128; H200, paged prefill at 4096 cached tokens,
// docs/kernels/cascade.md, v7). Rows by cp.async took ~2.9 us whatever the page size, paced by
// the producer's instructions per row; with few of them (v15, v16) a block of pages of 16 takes
// ~2 us, near the large boxes' rate, so the host takes this source for pages of <= 16.
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
  // `thread % kChunks` of rows r0, r0 + kRowsPerPass, ... A block's page ids are read once per
  // warp, a lane each, and passed on with shuffles: one read latency per block instead of one
  // per row (a block's ids are in one or two 128-byte lines). Strides, and a head's offset, fit
  // 31 bits (cuda/paged_fwd.cpp checks and sends other calls to the sm80 kernel).
  //
  // The producer's issue paces a block (ncu of the cascade's shared level: ~960 instructions a
  // block per producer warp, the consumers waiting on the copies; docs/kernels/cascade.md, v15),
  // so a row's copy is kept to few instructions: byte offsets, unsigned, so that an address is
  // 32 x 32 -> 64-bit multiply-adds (IMAD.WIDE.U32; signed element offsets took ptxas a 64 x 64
  // multiply and a shift each), and for pages of 16 tokens one multiply-add per page.
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
    const bool is_k = op == KvOperand::k;
    const std::uint32_t page_bytes = 2u * std::uint32_t(is_k ? kv.k_page_stride : kv.v_page_stride);
    const std::uint32_t slot_bytes = 2u * std::uint32_t(is_k ? kv.k_slot_stride : kv.v_slot_stride);
    const std::uint32_t head_stride = std::uint32_t(is_k ? kv.k_head_stride : kv.v_head_stride);
    const std::uint64_t chunk_base =
        reinterpret_cast<std::uint64_t>(is_k ? kv.k_pages : kv.v_pages) +
        2u * (std::uint32_t(k.head_kv) * head_stride + chunk * 8u);
    // The 128-byte swizzle of a TMA box: 16-byte unit u of row r lands at u ^ (r % 8). Rows of
    // pass j are r0 + j * kRowsPerPass, a multiple of 4 apart, so r % 8 is r0 % 8 with bit 2
    // flipped on odd passes when kRowsPerPass is 4 (d 256), and r0 % 8 on every pass otherwise.
    static_assert(kRowsPerPass % 4 == 0, "a pass's rows keep their swizzle up to bit 2");
    const int slab = chunk / 8, unit = chunk % 8;
    const std::uint32_t row0_at =
        ptx::smem_address(dst) + std::uint32_t(slab * T::kBlockN + r0) * T::kSlabBytesPerRow;
    const std::uint32_t even_at = row0_at + std::uint32_t((unit ^ (r0 & 7)) * 16);
    const std::uint32_t odd_at = row0_at + std::uint32_t((unit ^ (r0 & 7) ^ 4) * 16);
    auto stage_at = [&](int j) {
      const bool flipped = kRowsPerPass % 8 != 0 && j % 2 == 1;
      return (flipped ? odd_at : even_at) + std::uint32_t(j * kRowsPerPass * T::kSlabBytesPerRow);
    };
    // A row past the keys copies nothing (zero fill) from an address that exists: page id 0.
    if (kv.page_shift == kPage16Shift) {
      // Pages of 16 tokens. key0 is a multiple of 16 (blocks of 128 or 80 keys, splits of a
      // multiple of 64: paged_fwd.cpp), so a pass's kRowsPerPass (4, 8 or 16) rows lie in one
      // page, the block's page j * kRowsPerPass / 16, at slots (j * kRowsPerPass) % 16 + r0.
      constexpr int kPages = (T::kBlockN + 15) / 16;
      static_assert(T::kBlockN % 16 == 0 && 16 % kRowsPerPass == 0 && kPages <= 32,
                    "a pass within one page of 16");
      int page = 0;  // lane l: the block's page l
      if (lane < kPages && key0 + 16 * lane < k.seq_len) {
        page = k.table[((key0 >> kPage16Shift) + lane) * int(kv.table_page)];
      }
      const int rows_left = k.seq_len - key0 - r0;  // pass j copies if j * kRowsPerPass < it
      const std::uint64_t row_base = chunk_base + std::uint64_t(std::uint32_t(r0)) * slot_bytes;
      std::uint64_t page_base = row_base;
#pragma unroll
      for (int j = 0; j < kPasses; ++j) {
        const int row = j * kRowsPerPass;  // the pass's first row in the block
        if (row % 16 == 0) {
          const int id = __shfl_sync(0xffffffffu, page, row / 16);
          page_base = row_base + std::uint64_t(std::uint32_t(id)) * page_bytes;
        }
        const std::uint64_t src = page_base + std::uint32_t(row % 16) * slot_bytes;
        ptx::cp_async_16(stage_at(j), reinterpret_cast<const void*>(src), row < rows_left);
      }
    } else {
      // Lane l reads the page of the row at pass l / kWarpRows, place l % kWarpRows in the warp.
      int page = 0;
      {
        const int key =
            key0 + (lane / kWarpRows) * kRowsPerPass + (r0 - lane / kChunks) + lane % kWarpRows;
        if (lane < kPasses * kWarpRows && key < k.seq_len) {
          page = k.table[(key >> kv.page_shift) * int(kv.table_page)];
        }
      }
      const int slot_mask = (1 << kv.page_shift) - 1;
#pragma unroll
      for (int j = 0; j < kPasses; ++j) {
        const int key = key0 + r0 + j * kRowsPerPass;
        const int row_page = __shfl_sync(0xffffffffu, page, j * kWarpRows + lane / kChunks);
        std::uint64_t src = chunk_base + std::uint64_t(std::uint32_t(row_page)) * page_bytes;
        src += std::uint64_t(std::uint32_t(key & slot_mask)) * slot_bytes;
        ptx::cp_async_16(stage_at(j), reinterpret_cast<const void*>(src), key < k.seq_len);
      }
    }
    ptx::cp_async_mbarrier_arrive(bar);
  }

 private:
  static constexpr int kPage16Shift = 4;
};

}  // namespace flashkit::cuda::sm90
