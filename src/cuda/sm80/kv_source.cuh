// Where the sm80 forward reads its K and V rows, chosen at compile time:
//   ContiguousKv  [batch, seqlen_k, heads_kv, d] tensors (attention_forward); the addressing the
//                 kernel always had, so its code generation is unchanged.
//   PagedKv       pages [num_pages, page_size, heads_kv, d] of a KV cache through a block table:
//                 key t of a sequence lives in page block_table[t >> page_shift] at slot
//                 t & (page_size - 1). Page sizes: any power of two (1..256 are tested).
// Both issue the same 16-byte cp.async per (row, 16-byte unit) into the swizzled tile; a paged row
// first reads its page id (one i32 load that L1 serves for the other units and rows of the page).
// The source also places the tile's query rows (Q copy, out and lse stores): contiguous as ever;
// paged calls may pack a GQA group into the rows (below).
//
// A paged call may also split each cache sequence's keys: kernel sequence b reads split
// b % key_splits of cache sequence b / key_splits, keys [s * split_keys, (s + 1) * split_keys).
// The cascade's shared level uses this to spread one long prefix over enough CTAs (its queries
// are few), each split writing a partial (o, lse) state that merge_states combines.
//
// GQA packing (q_pack = group > 1): the kernel runs one "head" per KV head (p.heads_q ==
// p.heads_kv) and its sequence row R is query token R / q_pack of query head
// head_kv * q_pack + R % q_pack, so the whole group shares every K/V tile and MMA row. The rows
// of a decode batch (64 requests x 1 token) then fill 128-row tiles (4 heads x 64 = 256 rows)
// instead of half of one per query head. Positions of packed rows are not the kernel's row
// indices, so packing goes with masks that ignore query positions (no causal, no window).
#pragma once

#include <cstdint>

#include "cuda/common/fwd_params.hpp"
#include "cuda/ptx/cp_async.cuh"
#include "cuda/sm80/fwd_tile_scheduler.cuh"
#include "cuda/sm80/paged_kv_params.hpp"
#include "cuda/sm80/smem_copy.cuh"

namespace flashkit::cuda::sm80 {

// The mainloop asks its source for a reader (`open`) where it used to compute the K/V pointers,
// so the contiguous kernel computes them at the same point as before (ptxas' register allocation
// of the d = 128 kernel depends on it: computed in the kernel prologue, its spills grew from 48 to
// 88 bytes per thread).
template <class Elem>
class ContiguousKv;

struct ContiguousKvSource {
  // Query rows are evenly spaced (row_offset is linear in the row), so a tile's rows can be
  // stored from one pointer per thread (smem_copy.cuh: store_tile).
  static constexpr bool kLinearRows = true;
  template <class Elem>
  __device__ __forceinline__ ContiguousKv<Elem> open(const FwdParams& p,
                                                     const FwdTile& tile) const {
    return ContiguousKv<Elem>(p, tile);
  }
  // Element offset of the tile's row `row` (sequence index) in a tensor of layout `lay`.
  __device__ __forceinline__ std::int64_t row_offset(const core::TokenLayout& lay,
                                                     const FwdTile& tile, int row) const {
    return core::element_offset(lay, tile.batch, tile.span.q_start, row, tile.head);
  }
};

template <class Elem>
class ContiguousKv {
 public:
  __device__ __forceinline__ ContiguousKv(const FwdParams& p, const FwdTile& tile)
      : k_(static_cast<const Elem*>(p.k) +
           core::element_offset(p.k_layout, tile.batch, tile.span.k_start, 0, tile.head_kv)),
        v_(static_cast<const Elem*>(p.v) +
           core::element_offset(p.v_layout, tile.batch, tile.span.k_start, 0, tile.head_kv)),
        k_stride_(p.k_layout.token_stride),
        v_stride_(p.v_layout.token_stride) {}

  // Issues the copy of keys [key0, key0 + Tile rows) of K (or V); rows >= valid become zeros.
  // The tile's query rows: q points at its first row.
  // kSharedBase: copy_tile_async's shared addressing (FwdTraits::kCopySharedBase).
  template <class Tile, int kThreads, bool kSharedBase, class Elem2>
  __device__ __forceinline__ void copy_q(std::uint32_t smem, const FwdParams& p,
                                         const FwdTile& tile, const Elem2* q) const {
    copy_tile_async<Tile, kThreads, kSharedBase>(smem, q, p.q_layout.token_stride,
                                                 tile.row_end - tile.row_begin);
  }

  template <class Tile, int kThreads, bool kSharedBase>
  __device__ __forceinline__ void copy_k(std::uint32_t smem, int key0, int valid) const {
    copy_tile_async<Tile, kThreads, kSharedBase>(smem, k_ + key0 * k_stride_, k_stride_, valid);
  }
  template <class Tile, int kThreads, bool kSharedBase>
  __device__ __forceinline__ void copy_v(std::uint32_t smem, int key0, int valid) const {
    copy_tile_async<Tile, kThreads, kSharedBase>(smem, v_ + key0 * v_stride_, v_stride_, valid);
  }

 private:
  const Elem* k_;
  const Elem* v_;
  std::int64_t k_stride_, v_stride_;
};

template <class Elem>
class PagedKv {
 public:
  // GQA packing places a row by its token and its head (row_offset), not one stride.
  static constexpr bool kLinearRows = false;
  // Also sets tile.span.len_k: the keys of this kernel sequence (its split of the cache's).
  // Strides in 32 bits (the host checks they fit): 64-bit ones cost the d = 128 kernel 40 more
  // bytes of spills per thread.
  __device__ __forceinline__ PagedKv(const PagedKvParams& kv, FwdTile& tile)
      : k_(static_cast<const Elem*>(kv.k_pages) + tile.head_kv * kv.k_head_stride),
        v_(static_cast<const Elem*>(kv.v_pages) + tile.head_kv * kv.v_head_stride),
        k_page_(int(kv.k_page_stride)),
        k_slot_(int(kv.k_slot_stride)),
        v_page_(int(kv.v_page_stride)),
        v_slot_(int(kv.v_slot_stride)),
        table_page_(int(kv.table_page)),
        page_shift_(kv.page_shift),
        q_pack_(kv.q_pack) {
    const int seq = tile.batch / kv.key_splits;
    table_ = kv.block_table + seq * kv.table_batch;
    int len = kv.seq_lens[seq * kv.seq_lens_stride];
    first_key_ = 0;
    if (kv.key_splits > 1) {
      first_key_ = (tile.batch % kv.key_splits) * kv.split_keys;
      len -= first_key_;
      len = len < 0 ? 0 : (len > kv.split_keys ? kv.split_keys : len);
    }
    tile.span.len_k = len;
  }

  // Already open: the constructor ran in the kernel, as the tile's key count depends on it.
  template <class E>
  __device__ __forceinline__ const PagedKv& open(const FwdParams&, const FwdTile&) const {
    return *this;
  }

  // Paged rows are addressed one by one through the block table, so kSharedBase does not apply.
  template <class Tile, int kThreads, bool kSharedBase, class Elem2>
  __device__ __forceinline__ void copy_q(std::uint32_t smem, const FwdParams& p,
                                         const FwdTile& tile, const Elem2*) const {
    constexpr int kPerThread = Tile::kUnitsTotal / kThreads;
    const Elem* q = static_cast<const Elem*>(p.q);
#pragma unroll
    for (int it = 0; it < kPerThread; ++it) {
      int row, unit;
      Tile::copy_order(it * kThreads + int(threadIdx.x), row, unit);
      const bool ok = row < tile.row_end - tile.row_begin;
      const Elem* src = q;
      if (ok) src = q + row_offset(p.q_layout, tile, tile.row_begin + row) + unit * 8;
      ptx::cp_async_16(smem + Tile::byte_offset(row, unit), src, ok);
    }
  }
  __device__ __forceinline__ std::int64_t row_offset(const core::TokenLayout& lay,
                                                     const FwdTile& tile, int row) const {
    return core::element_offset(lay, tile.batch, tile.span.q_start, row / q_pack_,
                                tile.head * q_pack_ + row % q_pack_);
  }

  template <class Tile, int kThreads, bool kSharedBase>
  __device__ __forceinline__ void copy_k(std::uint32_t smem, int key0, int valid) const {
    copy<Tile, kThreads>(smem, k_, k_page_, k_slot_, key0, valid);
  }
  template <class Tile, int kThreads, bool kSharedBase>
  __device__ __forceinline__ void copy_v(std::uint32_t smem, int key0, int valid) const {
    copy<Tile, kThreads>(smem, v_, v_page_, v_slot_, key0, valid);
  }

 private:
  template <class Tile, int kThreads>
  __device__ __forceinline__ void copy(std::uint32_t smem, const Elem* pages, int page_stride,
                                       int slot_stride, int key0, int valid) const {
    constexpr int kPerThread = Tile::kUnitsTotal / kThreads;
    const int shift = page_shift_;
    const int slot_mask = (1 << shift) - 1;
#pragma unroll
    for (int it = 0; it < kPerThread; ++it) {
      int row, unit;
      Tile::copy_order(it * kThreads + int(threadIdx.x), row, unit);
      const bool ok = row < valid;
      const Elem* src = pages;
      if (ok) {
        const int key = first_key_ + key0 + row;
        const std::int64_t page = table_[(key >> shift) * table_page_];
        src = pages + page * page_stride + (key & slot_mask) * slot_stride + unit * 8;
      }
      ptx::cp_async_16(smem + Tile::byte_offset(row, unit), src, ok);
    }
  }

  const Elem* k_;
  const Elem* v_;
  int k_page_, k_slot_, v_page_, v_slot_, table_page_, page_shift_, q_pack_;
  const std::int32_t* table_;
  int first_key_;
};

}  // namespace flashkit::cuda::sm80
