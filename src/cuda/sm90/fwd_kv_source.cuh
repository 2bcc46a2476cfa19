// Where the sm90 forward's producer copies Q, K and V from, and where its epilogue puts a tile's
// rows, chosen at compile time (the kernel's Source parameter):
//   ContiguousSource  attention_forward's [batch, tokens, heads, d] tensors: one TMA box per
//                     64-column slab of a tile (fwd_maps.cpp).
//   PagedSource       cache pages [num_pages, page_size, heads_kv, d] through a block table (the
//                     sm80 paged source's parameters, sm80/paged_kv_params.hpp): a KV block is
//                     kBlockN / box_rows boxes per slab, box i from page
//                     block_table[key_i >> page_shift] at slot key_i & (page_size - 1). box_rows
//                     divides the page size, the block and the split (paged_fwd.cpp), so no box
//                     crosses a page. Pages of >= 32 tokens.
//   PagedRowSource    the same pages row by row with cp.async (fwd_paged_rows.cuh): pages of
//                     <= 16 tokens, where a box per page costs the TMA unit more than the rows.
// The paged sources share PagedSourceCommon: key splits and GQA packing as in
// sm80/kv_source.cuh. Every source copies whole boxes or rows, and TMA zero-fills what lies
// outside a map. What lies inside it but past the sequence is a cache slot of the sequence's last
// page that holds no token yet (NaN in the tests): K there only gives scores the key mask
// replaces, but V there would meet P = 0 in the P V product, and 0 x NaN is NaN. So the paged
// producers zero those V rows (PagedSource: load_kv with a ProducerFix; PagedRowSource: cp.async's
// zero fill).
// Traits of a source: kProducerThreads, the producer warpgroup's threads that issue K and V
// copies (a stage's full barrier takes one arrival from each); kKvThroughGenericProxy, whether
// those copies are generic-proxy writes (cp.async) that the consumers fence before wgmma.
#pragma once

#include <cstdint>

#include "cuda/common/fwd_params.hpp"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/tma.cuh"
#include "cuda/ptx/warpgroup.cuh"
#include "cuda/sm80/fwd_tile_scheduler.cuh"
#include "cuda/sm80/paged_kv_params.hpp"
#include "cuda/sm90/fwd_maps.hpp"

namespace flashkit::cuda::sm90 {

// One TMA box per 64-column slab: slab s of `rows` rows lands rows * 128 bytes after slab s - 1.
template <class T, int kRank>
__device__ __forceinline__ void load_slabs(unsigned char* dst, int rows, const CUtensorMap& map,
                                           std::uint64_t* bar, const int (&at)[kRank]) {
#pragma unroll
  for (int s = 0; s < T::kSlabs; ++s) {
    int c[kRank];
    c[0] = s * 64;
#pragma unroll
    for (int i = 1; i < kRank; ++i) c[i] = at[i];
    ptx::tma_load<kRank>(dst + s * rows * T::kSlabBytesPerRow, map, bar, c);
  }
}

// The producer's own barrier (FwdBarriers::fix) for a box it must see land, and its count of
// completed phases.
struct ProducerFix {
  std::uint64_t* bar;
  int uses;
};

// The operand a K/V copy fills.
enum class KvOperand { k, v };

struct ContiguousSource {
  static constexpr int kProducerThreads = 1;
  static constexpr bool kKvThroughGenericProxy = false;

  // A tile's keys: where its sequence's K / V rows start in the maps.
  struct Keys {
    int head_kv, k_start, batch;
  };

  __device__ __forceinline__ Keys keys(const FwdParams& p, const sm80::FwdTile& tile) const {
    return {tile.head_kv, int(tile.span.k_start), p.cu_seqlens_q != nullptr ? 0 : tile.batch};
  }
  // The tile's key count is the sequence's (tile.span already has it).
  __device__ __forceinline__ void set_keys(sm80::FwdTile&) const {}

  template <class T>
  __device__ __forceinline__ void load_q(unsigned char* dst, const FwdParams& p,
                                         const FwdMaps& maps, std::uint64_t* bar,
                                         const sm80::FwdTile& tile) const {
    const int batch = p.cu_seqlens_q != nullptr ? 0 : tile.batch;
    load_slabs<T, 4>(dst, T::kBlockM, maps.q, bar,
                     {0, tile.head, int(tile.span.q_start) + tile.row_begin, batch});
  }
  // Block n of K (or V) into a stage; `bar` completes when it has landed.
  template <class T>
  __device__ __forceinline__ void load_kv(unsigned char* dst, const FwdMaps& maps, KvOperand op,
                                          std::uint64_t* bar, const Keys& k, int n, ProducerFix*,
                                          int /*thread*/) const {
    ptx::mbarrier_arrive_expect_tx(bar, T::kKvBytes);
    load_slabs<T, 4>(dst, T::kBlockN, op == KvOperand::k ? maps.k : maps.v, bar,
                     {0, k.head_kv, k.k_start + n * T::kBlockN, k.batch});
  }
  __device__ __forceinline__ std::int64_t row_offset(const core::TokenLayout& lay,
                                                     const sm80::FwdTile& tile, int row) const {
    return core::element_offset(lay, tile.batch, tile.span.q_start, row, tile.head);
  }
  // O may go out through shared memory and a TMA store (fwd_epilogue.cuh).
  __device__ __forceinline__ bool rows_are_tokens() const { return true; }
};

struct PagedSourceCommon {
  sm80::PagedKvParams kv;

  struct Keys {
    const std::int32_t* table;  // the cache sequence's block-table row
    int first;                  // the split's first key in the cache sequence
    int seq_len;                // the cache sequence's keys
    int head_kv;
  };

  __device__ __forceinline__ Keys keys(const FwdParams&, const sm80::FwdTile& tile) const {
    const int seq = tile.batch / kv.key_splits;
    return {kv.block_table + seq * kv.table_batch, (tile.batch % kv.key_splits) * kv.split_keys,
            kv.seq_lens[seq * kv.seq_lens_stride], tile.head_kv};
  }
  // The tile's key count: its split's share of the cache sequence (p.seqlen_k only bounds it).
  __device__ __forceinline__ void set_keys(sm80::FwdTile& tile) const {
    const int seq = tile.batch / kv.key_splits;
    int len = kv.seq_lens[seq * kv.seq_lens_stride];
    if (kv.key_splits > 1) {
      len -= (tile.batch % kv.key_splits) * kv.split_keys;
      len = len < 0 ? 0 : (len > kv.split_keys ? kv.split_keys : len);
    }
    tile.span.len_k = len;
  }

  // Packed or not, q is viewed as [batch, q_len, heads_kv, q_pack, d] (fwd_maps.cpp): row R of a
  // tile is token R / q_pack of query head head * q_pack + R % q_pack, which one box per slab
  // lays out as [tokens][q_pack] rows. Called by producer thread 0.
  template <class T>
  __device__ __forceinline__ void load_q(unsigned char* dst, const FwdParams&, const FwdMaps& maps,
                                         std::uint64_t* bar, const sm80::FwdTile& tile) const {
    load_slabs<T, 5>(dst, T::kBlockM, maps.q, bar,
                     {0, 0, tile.head, tile.row_begin / kv.q_pack, tile.batch / kv.key_splits});
  }

  __device__ __forceinline__ std::int64_t row_offset(const core::TokenLayout& lay,
                                                     const sm80::FwdTile& tile, int row) const {
    return core::element_offset(lay, tile.batch, tile.span.q_start, row / kv.q_pack,
                                tile.head * kv.q_pack + row % kv.q_pack);
  }
  // A TMA store of O needs its rows to be one head's tokens of one sequence's output.
  __device__ __forceinline__ bool rows_are_tokens() const {
    return kv.q_pack == 1 && kv.key_splits == 1;
  }
};

struct PagedSource : PagedSourceCommon {
  static constexpr int kProducerThreads = 1;
  static constexpr bool kKvThroughGenericProxy = false;

  int box_rows;   // rows per K / V box: divides the page size, kBlockN and split_keys
  int num_pages;  // the maps' page extent: a box at this page is all zeros

  // fix given (V): rows past the sequence's end inside its last page become zeros (see the top).
  template <class T>
  __device__ __forceinline__ void load_kv(unsigned char* dst, const FwdMaps& maps, KvOperand op,
                                          std::uint64_t* bar, const Keys& k, int n,
                                          ProducerFix* fix, int /*thread*/) const {
    const CUtensorMap& map = op == KvOperand::k ? maps.k : maps.v;
    const int key0 = k.first + n * T::kBlockN;
    const int boxes = T::kBlockN / box_rows;
    const std::uint32_t box_bytes = std::uint32_t(box_rows) * T::kSlabs * T::kSlabBytesPerRow;
    const int tail = k.seq_len - key0;  // valid rows of the block, if below kBlockN
    std::uint32_t bytes = T::kKvBytes;
    int partial = -1;  // the box holding the sequence's end, when it has rows past it
    if (fix != nullptr && tail > 0 && tail < T::kBlockN && tail % box_rows != 0) {
      partial = tail / box_rows;
      bytes -= box_bytes;
      // Its own barrier, waited on here: the rows are zeroed before the stage's barrier can
      // complete (the consumers' wgmma reads them through the async proxy, hence the fence).
      ptx::mbarrier_arrive_expect_tx(fix->bar, box_bytes);
      load_box<T>(dst, map, fix->bar, k, key0, partial);
      ptx::mbarrier_wait(fix->bar, std::uint32_t(fix->uses++) & 1);
      for (int row = tail; row < (partial + 1) * box_rows; ++row) {
#pragma unroll
        for (int s = 0; s < T::kSlabs; ++s) {
          uint4* r = reinterpret_cast<uint4*>(dst + (s * T::kBlockN + row) * T::kSlabBytesPerRow);
#pragma unroll
          for (int u = 0; u < T::kSlabBytesPerRow / 16; ++u) r[u] = make_uint4(0, 0, 0, 0);
        }
      }
      ptx::fence_proxy_async();
    }
    ptx::mbarrier_arrive_expect_tx(bar, bytes);
    for (int i = 0; i < boxes; ++i) {
      if (i != partial) load_box<T>(dst, map, bar, k, key0, i);
    }
  }

 private:
  // Box i of the block at key0: rows [key0 + i * box_rows, + box_rows) of one page, or zeros
  // past the sequence's pages (a page index outside the map).
  template <class T>
  __device__ __forceinline__ void load_box(unsigned char* dst, const CUtensorMap& map,
                                           std::uint64_t* bar, const Keys& k, int key0,
                                           int i) const {
    const int key = key0 + i * box_rows;
    int page = num_pages, slot = 0;
    if (key < k.seq_len) {
      page = k.table[(key >> kv.page_shift) * kv.table_page];
      slot = key & ((1 << kv.page_shift) - 1);
    }
    unsigned char* box = dst + i * box_rows * T::kSlabBytesPerRow;
#pragma unroll
    for (int s = 0; s < T::kSlabs; ++s) {
      const int c[4] = {s * 64, k.head_kv, slot, page};
      ptx::tma_load<4>(box + s * T::kBlockN * T::kSlabBytesPerRow, map, bar, c);
    }
  }
};

}  // namespace flashkit::cuda::sm90
