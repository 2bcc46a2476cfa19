// The one place that sizes the sm90 forward's tiles and shared memory, per head dim.
//
// A CTA is three warpgroups: warpgroup 0 produces (TMA loads of Q once and of K, V per block
// through kStages stages), warpgroups 1 and 2 consume, each owning 64 of the tile's 128 query rows
// (one wgmma m64 row block). Per consumer thread: S = block_n / 2 f32, O = d / 2 f32, P =
// block_n / 4 registers; with setmaxnreg the consumers get 240 registers and the producer 24
// (128 x 24 + 256 x 240 = 64512 of the SM's 65536).
//   d 64:  128 x 128 (S 64 + O 32); smem Q 16 KB + 2 stages x (K + V) 64 KB = 80 KB.
//   d 128: 128 x 128 (S 64 + O 64); 32 KB + 128 KB = 160 KB.
//   d 256: 128 x 64  (S 32 + O 128); 64 KB + 128 KB = 192 KB, under the 227 KB a CTA may have.
// All operands use the 128-byte swizzle: a tile is d / 64 slabs of [rows][64 elements], which is
// both one TMA box per slab and wgmma's canonical K-major (Q, K) or N-major (V) layout.
#pragma once

#include "cuda/sm90/fwd_sync.hpp"

namespace flashkit::cuda::sm90 {

constexpr int fwd_block_n(int head_dim) {
  return head_dim <= 128 ? 128 : 64;
}

template <class ElemT, int kHeadDim>
struct FwdTraits {
  using Elem = ElemT;
  static constexpr int kD = kHeadDim;
  static constexpr int kBlockM = 128;
  static constexpr int kBlockN = fwd_block_n(kHeadDim);
  static constexpr int kStages = kFwdStages;
  static constexpr int kThreads = 384;
  static constexpr int kConsumerThreads = 256;
  static constexpr int kProducerRegs = 24, kConsumerRegs = 240;
  // What the sm80 softmax helpers (sm80/fwd_softmax.cuh) read: each consumer warp owns one m16
  // row block, warp w of the 8 consumer warps rows 16w..16w+15.
  static constexpr int kMmaM = 1;
  static constexpr int kRowsPerWarp = 16;

  static constexpr int kSlabBytesPerRow = 128;  // 64 f16/bf16 elements: the swizzle span
  static constexpr int kSlabs = kD / 64;
  static constexpr int kQBytes = kBlockM * kD * 2;
  static constexpr int kKvBytes = kBlockN * kD * 2;
  static constexpr int kKOffset = kQBytes;
  static constexpr int kVOffset = kQBytes + kStages * kKvBytes;
  static constexpr int kBarrierOffset = kQBytes + 2 * kStages * kKvBytes;
  // + 1024: dynamic shared memory is only 16-byte aligned; tiles need the 1024-byte atom.
  static constexpr int kSmemBytes = kBarrierOffset + int(sizeof(FwdBarriers)) + 1024;

  static_assert(kD % 64 == 0, "sm90 forward tiles d in 64-element slabs");
  static_assert(kStages == kFwdStages, "FwdBarriers holds the stages");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per CTA on sm90");
};

}  // namespace flashkit::cuda::sm90
