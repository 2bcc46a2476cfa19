// The one place that sizes the sm90 forward's tiles and shared memory, per head dim and call.
//
// A CTA is one producer warpgroup (TMA loads of Q once and of K, V per block through kStages
// stages) and 1, 2 or 3 consumer warpgroups, each owning 64 of the tile's query rows (one wgmma
// m64 row block). Per consumer thread: S = block_n / 2 f32, O = d / 2 f32, P = block_n / 4
// registers; with setmaxnreg the producer keeps 24 registers and the consumers share the rest
// of the CTA's share of the register file (2 consumers: 128 x 24 + 256 x 240 = 64512 of the
// SM's 65536; 3: 128 x 24 + 384 x 160 = 64512; 1, two CTAs per SM: 128 x 24 + 128 x 232 = 32768;
// 1, three streams of a persistent CTA: 128 x 32 + 3 x 128 x 160 = 65536).
//   d 64:  192 x 128, 3 consumers (S 64 + O 32 + P 32 fit 160); smem Q 24 KB + 2 stages x
//          (K + V) 64 KB = 88 KB. Three consumers, not two: at 128 x 128 the kernel was
//          issue-bound with 2.25 warps per scheduler (ncu, N = 4k: 48 % of issue slots used);
//          a third consumer adds a warp per scheduler and shares each K/V block among 192 rows
//          (H200: +10-15 % at N >= 2k). 64 x 128 with one consumer, three walkers per SM (the
//          three streams of a persistent CTA, FwdCta, each with one 8 KB Q buffer and its own
//          64 KB of stages: 3 x 73 KB; two CTAs per SM where a CTA runs one tile), instead:
//          - without a mask below 2048 keys, where the CTA's persistent walk (which 3 consumers
//            have no registers for: fwd_tile_scheduler.cuh) pays more, and where 192-row tiles
//            would pad the query rows by more than an eighth over 64-row ones;
//          - under a causal or window mask below 8192 query rows: 192-row tiles cross the
//            diagonal over more masked blocks (causal N = 1k: -12 % against 128 x 128).
//          The walkers of an SM are not ordered against each other (no pingpong turn between
//          them); each reads K and V per 64 query rows. H200: two such walkers against 128 x 128
//          tiles of two consumers: N = 512 +5.8 %, causal 512 / 1k / 2k +2.3 / +3.6 / +4.0 %
//          (v23); three against two (C++ bench / Python suite): N = 512 +6.6 / +7.0 %, 1k
//          +5.4 / +0.1 %, causal 512 / 1k +6.4 / +6.9 %, +4.7 / +3.3 %, causal 2k +1.9 / -2.0 %;
//          three against 192 x 128 at causal 4k: +1.8 / -6.7 % (v37); with the mask's row
//          forms on three streams (v38: +4-8 %), +3.4 % in the suite, so the masked bound is
//          8192 rows (measured at 4096; docs/kernels/sm90_fwd.md, v37 and v38).
//   d 128: 128 x 176 from 8192 keys on (S 88 + O 64 + P 44); 32 KB + 176 KB = 208 KB: 27 %
//          fewer blocks, so less per-block work (barrier waits, row maxima, O rescale): H200
//          +3-9 % at 8k-16k keys, causal +1-5 %. Below, 128 x 128 (S 64 + O 64; 160 KB): with
//          fewer keys the last, partly masked 176-key block costs more than the blocks saved
//          (4k: even; 1k: -5 %; 512: -9 %).
//   d 256: 128 x 80, 2 consumers (S 40 + O 128 + P 20); 64 KB + 160 KB = 224 KB, under the
//          227 KB a CTA may have (with the 1 KB of alignment slack and the barriers: 230472
//          bytes of 232448). 80 keys, not 64: a fifth fewer blocks (H200: +7-14 % from N = 2k,
//          causal included). At <= 512 keys, or <= 1024 under a mask, 128 x 64 (128 KB of
//          stages): 80-key blocks cover 512 keys in 560 columns, and a causal 512 call's 128-row
//          tiles in 1440 against 1280 (12.5 % more MMA work, 6 % at 1k); H100: N = 512 +3.7 %,
//          causal 512 / 1k +6.1 / +5.5 %; the same bounds doubled gained nothing the runs'
//          spread did not cover (docs/kernels/sm90_fwd.md, v50).
// All operands use the 128-byte swizzle: a tile is d / 64 slabs of [rows][64 elements], which is
// both one TMA box per slab and wgmma's canonical K-major (Q, K) or N-major (V) layout.
#pragma once

#include <cstdint>

#include "cuda/sm90/fwd_sync.hpp"

namespace flashkit::cuda::sm90 {

struct FwdShape {
  int consumers;  // consumer warpgroups: the tile has 64 x consumers query rows
  int block_n;    // keys per block
  constexpr int block_m() const { return 64 * consumers; }  // query rows per tile
  constexpr bool operator==(const FwdShape& o) const {
    return consumers == o.consumers && block_n == o.block_n;
  }
};

// 192-row tiles pad seqlen_q query rows by at most an eighth more than 128-row tiles do.
constexpr bool fwd_192_rows_pad_little(int seqlen_q) {
  const std::int64_t q = seqlen_q;
  return 8 * ((q + 191) / 192) * 192 <= 9 * ((q + 127) / 128) * 128;
}

// The shape of one call (see the notes above); masked: causal or a window; seqlen_*: the longest
// sequence of the batch.
constexpr FwdShape fwd_shape(int head_dim, bool masked, int seqlen_q, int seqlen_k) {
  if (head_dim <= 64) {
    const bool three =
        masked ? seqlen_q >= 8192 : seqlen_k >= 2048 && fwd_192_rows_pad_little(seqlen_q);
    return {three ? 3 : 1, 128};
  }
  if (head_dim <= 128) return {2, seqlen_k >= 8192 ? 176 : 128};
  return {2, seqlen_k <= (masked ? 1024 : 512) ? 64 : 80};
}

// Every shape fwd_shape gives a head dim is one of these two, which its instance file compiles.
constexpr FwdShape fwd_long_open_shape(int head_dim) {
  return fwd_shape(head_dim, false, 1 << 30, 1 << 30);
}
constexpr FwdShape fwd_short_masked_shape(int head_dim) {
  return fwd_shape(head_dim, true, 0, 0);
}
// Over cache pages (fwd_kv_source.cuh): the short masked shape (d = 256: the long one, 80-key
// blocks; the 64-key blocks were measured on contiguous calls only), whose tiles of 128 rows (64
// at d = 64) a GQA group of 2, 4, 8 ... packs into whole (a group that does not divide them goes
// to the sm80 kernel: cuda/paged_fwd.cpp), and whose blocks (128 keys; 80 at d = 256) divide
// into boxes of 16 rows, the smallest page the path takes.
constexpr FwdShape fwd_paged_shape(int head_dim) {
  return head_dim <= 128 ? fwd_short_masked_shape(head_dim) : fwd_long_open_shape(head_dim);
}

constexpr bool fwd_shapes_compiled(int head_dim) {
  for (bool masked : {false, true}) {
    for (int len : {0, 1 << 30}) {
      const FwdShape s = fwd_shape(head_dim, masked, len, len);
      if (!(s == fwd_long_open_shape(head_dim) || s == fwd_short_masked_shape(head_dim))) {
        return false;
      }
    }
  }
  return true;
}

// kWalkers: the tile walkers an SM holds, as CTAs of one walker each or (one consumer, persistent)
// as the streams of one CTA (FwdCta); it splits the SM's registers and shared memory.
template <class ElemT, int kHeadDim, int kConsumerWarpgroups, int kKeysPerBlock,
          int kWalkers = kConsumerWarpgroups == 1 ? 2 : 1>
struct FwdTraits {
  using Elem = ElemT;
  static constexpr int kD = kHeadDim;
  static constexpr int kConsumers = kConsumerWarpgroups;
  static constexpr int kBlockM = FwdShape{kConsumers, kKeysPerBlock}.block_m();
  static constexpr int kBlockN = kKeysPerBlock;
  static constexpr int kStages = kFwdStages;
  static constexpr int kConsumerThreads = 128 * kConsumers;
  static constexpr int kThreads = 128 + kConsumerThreads;
  // One consumer: two or three walkers share an SM, each walking its own 64-row tiles with its
  // own stages (d 64 above; at d = 128 the 64-key blocks two walkers' stages would allow
  // measured -5..-18 %).
  static constexpr int kWalkersPerSm = kWalkers;
  static constexpr int kProducerRegs = 24;
  // What is left of the CTA's share of the register file, in setmaxnreg's multiples of 8.
  static constexpr int kConsumerRegs =
      (65536 / kWalkersPerSm - 128 * kProducerRegs) / kConsumerThreads / 8 * 8;
  // What the sm80 softmax helpers (sm80/fwd_softmax.cuh) read: each consumer warp owns one m16
  // row block, warp w of the consumer warps rows 16w..16w+15.
  static constexpr int kMmaM = 1;
  static constexpr int kRowsPerWarp = 16;
  // The softmax's held max (sm80/fwd_softmax.cuh, kStaleMaxSlack): most blocks skip O's rescale.
  // With the rescale on the chain from P V's wait to the next issue it measured d = 256 +5-7 %,
  // d = 64 -5 %, d = 128 -4..+2 % (docs/kernels/sm90_fwd.md, v17); with the rescale under S
  // (below), d = 128 +4..+9 % in 128-key blocks and +2..+5 % in 176-key ones (v43).
  static constexpr bool kStaleMax = kD >= 128;
  // Where O is rescaled (fwd_mainloop.cuh): between the issue of the next S and this block's
  // P V (FlashAttention-3's order), under that S on the tensor cores, rather than after P V's
  // wait. Measured at d = 256 +1-2 % and at d = 128 in 176-key blocks 0..+1.5 % (v21); alone it
  // loses 2-4.5 % at d = 128 in 128-key blocks and 1.5-3.5 % at d = 64 (v43), but d = 128 takes
  // it with the held max, which gains more with it (v43).
  static constexpr bool kRescaleUnderS = kD >= 128;
  // Whether the consumer warpgroups take turns to issue their GEMMs (pingpong, fwd_mainloop.cuh).
  // Measured without turns, same process: d = 128 in 128-key blocks +0.6..+3.4 % (N 512-4k,
  // causal 512-2k), but in 176-key blocks -0.8..-1.9 %, d = 64 in 192-row tiles -1..-5 %, d = 256
  // -0.7..+0.3 % (docs/kernels/sm90_fwd.md, v24). One consumer has no one to take turns with.
  static constexpr bool kPingpong = kConsumers > 1 && !(kD == 128 && kBlockN == 128);
  // Whether a block's mask test runs before the wait for its S rather than after
  // (fwd_mainloop.cuh, block_masked). Measured on every shape: with one consumer (d = 64 short)
  // +1.0-2.2 %; with three consumers -7 to -8 %, d = 128 -1 to -5.5 %, d = 256 flat
  // (docs/kernels/sm90_fwd.md, v27).
  static constexpr bool kMaskTestAhead = kConsumers == 1;
  // The mask's per-row forms (sm80/fwd_softmax.cuh, apply_mask: one compare an element on causal
  // rows, against five). Measured with the walk's fast divisions (v36): d = 128 causal 512 / 1k /
  // 2k +1.2 / +0.8 / +1.3 %, d = 64 three consumers causal 4k +3.3 %. The two-walker d = 64
  // kernel ran 2-5 % slower with them (v35; its code rescheduled around them), but the three
  // streams' consumers, at 160 registers, spill less with them (104 -> 20 bytes a thread) and
  // ran 4-8 % faster, unmasked rows included (N 512 / 1k +3.8 / +7.9 %, causal 512 / 1k / 2k
  // +6.8 / +6.9 / +6.3 %: docs/kernels/sm90_fwd.md, v38). Two-walker one-consumer tiles (cache
  // pages, and calls the persistent walk does not take) keep the per-element form.
  static constexpr bool kMaskRowForms = kConsumers != 1 || kWalkersPerSm == 3;

  static constexpr int kSlabBytesPerRow = 128;  // 64 f16/bf16 elements: the swizzle span
  static constexpr int kSlabs = kD / 64;
  static constexpr int kQBytes = kBlockM * kD * 2;
  static constexpr int kKvBytes = kBlockN * kD * 2;
  // + 1024: dynamic shared memory is only 16-byte aligned; tiles need the 1024-byte atom.
  static constexpr int smem_bytes(int q_buffers) {
    return q_buffers * kQBytes + 2 * kStages * kKvBytes + int(sizeof(FwdBarriers)) + 1024;
  }
  // A persistent CTA (fwd_tile_scheduler.cuh) needs a second Q buffer (with one, the next
  // tile's Q would wait for this tile's epilogue) and registers for the tile loop: with 3
  // consumers (160 registers each) ptxas spilled ~200 B per thread in the mainloop, with 1 or 2
  // none. So two Q buffers with 1 or 2 consumers where they fit (d 64: 80 KB a CTA with one
  // consumer, 96 KB with two; d 128 with 128-key blocks: 192 KB), one otherwise (d 64 with 3
  // consumers, 88 KB; d 128 with 176-key blocks, where 240 KB would not fit; d 256, 288 KB). An
  // SM's 228 KB hold its CTAs' shared memory plus 1 KB each that the system reserves. Three
  // one-consumer walkers per SM have one Q buffer each (3 x 81 KB would not fit) and walk
  // persistently all the same: while one waits for its next Q, the other two keep the SM busy.
  static constexpr int kQBuffers =
      kConsumers <= 2 && kWalkersPerSm * (smem_bytes(2) + 1024) <= 228 * 1024 ? 2 : 1;
  // d = 256 can walk persistently with its one Q buffer, released once the tile's last S = Q K^T
  // has read it (every consumer thread arrives on q_empty after its wait), so the next tile's Q
  // lands under this tile's last P V and epilogue; O is then staged over the V stages, whose next
  // loads wait for its stores (FlashAttention-3's layout). Only at short keys
  // (fwd_one_q_walk_pays). (With the release after the epilogue, v15 measured the walk 1.5-9 %
  // slower than a CTA per tile.) A CTA of one tile keeps the staging in Q.
  static constexpr bool kWalkReleasesQAfterS = kQBuffers == 1 && kConsumers == 2 && kD >= 256;
  static constexpr bool kPersistentFits =
      kQBuffers == 2 || kWalkersPerSm == 3 || kWalkReleasesQAfterS;
  static constexpr int kKOffset = kQBuffers * kQBytes;
  static constexpr int kVOffset = kKOffset + kStages * kKvBytes;
  static constexpr int kBarrierOffset = kVOffset + kStages * kKvBytes;
  static constexpr int kSmemBytes = smem_bytes(kQBuffers);

  static_assert(kD % 64 == 0, "sm90 forward tiles d in 64-element slabs");
  static_assert(kConsumers == 2 || kD <= 64,
                "consumer warpgroups: 2 (pingpong); 1 or 3 where registers and smem allow");
  static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "wgmma n and k steps");
  static_assert(fwd_shapes_compiled(kD), "fwd_shape gives a shape no instance compiles");
  static_assert(kConsumers <= kFwdMaxConsumers, "FwdNamedBarrier ids per consumer");
  static_assert(kConsumerRegs <= 240, "setmaxnreg: at most 256, and the kernel needs no more");
  static_assert(kStages == kFwdStages, "FwdBarriers holds the stages");
  static_assert(kQBuffers <= kFwdMaxQBuffers, "FwdBarriers holds the Q buffers");
  static_assert(kWalkersPerSm == 1 || (kConsumers == 1 && kWalkersPerSm <= 3),
                "one-consumer walkers, two or three to an SM");
  static_assert(kSmemBytes <= 227 * 1024 && kWalkersPerSm * (kSmemBytes + 1024) <= 228 * 1024,
                "shared memory per CTA and per SM on sm90");
};

// A CTA of kStreams walkers of FwdTraits T's tiles (fwd_kernel.cuh): each stream is a producer
// thread, T::kConsumers consumer warpgroups and their own region of shared memory (Q buffers,
// stages, barriers), walking its own tiles. Three streams of one consumer each (the d = 64 short
// shape, persistent) put three consumer warps on each warp scheduler, where one-consumer CTAs
// would hold two (docs/kernels/sm90_fwd.md: two streams in a CTA +0-4.5 % over two CTAs, v31;
// three streams -2 to +7 % over two by shape and harness, v37).
template <class T, int kStreams>
struct FwdCta {
  static constexpr int kThreads = 128 + kStreams * T::kConsumerThreads;
  static constexpr int kPerSm = T::kWalkersPerSm / kStreams;
  static constexpr int kStreamBytes =
      (T::kBarrierOffset + int(sizeof(FwdBarriers)) + 1023) / 1024 * 1024;
  static constexpr int kSmemBytes = kStreams == 1 ? T::kSmemBytes : kStreams * kStreamBytes + 1024;
  // setmaxnreg moves registers within what the CTA got at launch, 65536 / 512 -> 128 a thread
  // with three streams: 128 x (128 - 32) = 384 x (160 - 128). At 32 a producer thread spills a
  // few values per tile, none in its block loop; at 160 the consumers spill 20 bytes a thread
  // (104 with the mask's per-element form, v37 -> v38), which the third warp per scheduler more
  // than pays for.
  static constexpr int kLaunchRegs = 65536 / (kThreads * kPerSm) / 8 * 8;
  static constexpr int kProducerRegs = kStreams == 1 ? T::kProducerRegs : 32;
  static constexpr int kConsumerRegs =
      kStreams == 1 ? T::kConsumerRegs
                    : (kThreads * kLaunchRegs - 128 * kProducerRegs) / (kThreads - 128) / 8 * 8;
  static_assert(kStreams == 1 || (kStreams == 3 && T::kConsumers == 1 && T::kWalkersPerSm == 3),
                "three streams of one consumer each, one walker each");
  static_assert(kSmemBytes <= 227 * 1024 && kPerSm * (kSmemBytes + 1024) <= 228 * 1024,
                "shared memory per CTA and per SM on sm90");
  static_assert(kConsumerRegs <= 240, "setmaxnreg: at most 256, and the kernel needs no more");
};

}  // namespace flashkit::cuda::sm90
