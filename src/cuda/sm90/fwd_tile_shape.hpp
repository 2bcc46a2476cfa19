// The one place that sizes the sm90 forward's tiles and shared memory, per head dim.
//
// A CTA is one producer warpgroup (TMA loads of Q once and of K, V per block through kStages
// stages) and fwd_consumers(d) consumer warpgroups, each owning 64 of the tile's query rows (one
// wgmma m64 row block). Per consumer thread: S = block_n / 2 f32, O = d / 2 f32, P = block_n / 4
// registers; with setmaxnreg the producer keeps 24 registers and the consumers share the rest
// (2 consumers: 128 x 24 + 256 x 240 = 64512 of the SM's 65536; 3: 128 x 24 + 384 x 160 = 64512).
//   d 64:  192 x 128, 3 consumers (S 64 + O 32 + P 32 fit 160); smem Q 24 KB + 2 stages x
//          (K + V) 64 KB = 88 KB. Three consumers, not two: at 128 x 128 the kernel was
//          issue-bound with 2.25 warps per scheduler (ncu, N = 4k: 48 % of issue slots used);
//          a third consumer adds a warp per scheduler and shares each K/V block among 192 rows
//          (H200: +10-15 % at N >= 2k). Under a causal or window mask with fewer than 4096
//          query rows, 128 x 128 with 2 consumers: 192-row tiles cross the diagonal over more
//          masked blocks (causal N = 1k: -12 %; 4k: +2 %; 16k: +4-7 %). fwd_consumers picks.
//   d 128: 128 x 128, 2 consumers (S 64 + O 64); 32 KB + 128 KB = 160 KB.
//   d 256: 128 x 64, 2 consumers (S 32 + O 128); 64 KB + 128 KB = 192 KB, under the 227 KB a CTA
//          may have.
// All operands use the 128-byte swizzle: a tile is d / 64 slabs of [rows][64 elements], which is
// both one TMA box per slab and wgmma's canonical K-major (Q, K) or N-major (V) layout.
#pragma once

#include "cuda/sm90/fwd_sync.hpp"

namespace flashkit::cuda::sm90 {

constexpr int fwd_block_n(int head_dim) {
  return head_dim <= 128 ? 128 : 64;
}

// The consumer counts a head dim is compiled for: 2, and 3 where the registers allow it.
constexpr int fwd_max_consumers(int head_dim) {
  return head_dim <= 64 ? 3 : 2;
}

// The consumer count of one call (see the d 64 note above); masked: causal or a window.
constexpr int fwd_consumers(int head_dim, bool masked, int seqlen_q) {
  return fwd_max_consumers(head_dim) == 3 && (!masked || seqlen_q >= 4096) ? 3 : 2;
}

template <class ElemT, int kHeadDim, int kConsumerWarpgroups>
struct FwdTraits {
  using Elem = ElemT;
  static constexpr int kD = kHeadDim;
  static constexpr int kConsumers = kConsumerWarpgroups;
  static constexpr int kBlockM = 64 * kConsumers;
  static constexpr int kBlockN = fwd_block_n(kHeadDim);
  static constexpr int kStages = kFwdStages;
  static constexpr int kConsumerThreads = 128 * kConsumers;
  static constexpr int kThreads = 128 + kConsumerThreads;
  static constexpr int kProducerRegs = 24;
  // What is left of the register file, in setmaxnreg's multiples of 8.
  static constexpr int kConsumerRegs = (65536 - 128 * kProducerRegs) / kConsumerThreads / 8 * 8;
  // What the sm80 softmax helpers (sm80/fwd_softmax.cuh) read: each consumer warp owns one m16
  // row block, warp w of the consumer warps rows 16w..16w+15.
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
  static_assert(kConsumers >= 2 && kConsumers <= fwd_max_consumers(kD),
                "consumer warpgroups: 2 (pingpong), 3 where the registers allow");
  static_assert(kConsumers <= kFwdMaxConsumers, "FwdNamedBarrier ids per consumer");
  static_assert(kConsumerRegs <= 240, "setmaxnreg: at most 256, and the kernel needs no more");
  static_assert(kStages == kFwdStages, "FwdBarriers holds the stages");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per CTA on sm90");
};

}  // namespace flashkit::cuda::sm90
