// The one place that sizes the sm80 forward's tiles, per head dim. Everything else (shared
// memory, fragments per warp, grid) derives from this function.
#pragma once

#include "cuda/common/smem_limits.hpp"
#include "cuda/ptx/swizzle.hpp"

namespace flashkit::cuda::sm80 {

struct FwdTileShape {
  int block_m;  // query rows per CTA
  int block_n;  // keys per KV block
  int warps;    // each warp owns block_m / warps whole rows, so row max/sum stay in the warp
  constexpr bool operator==(const FwdTileShape& o) const {
    return block_m == o.block_m && block_n == o.block_n && warps == o.warps;
  }
};

// Per thread the O accumulator holds block_m * d / (32 * warps) fp32 values and the S block
// block_m * block_n / (32 * warps); both must fit in 255 registers with room for addresses and
// fragments (ptxas -v, docs/kernels/sm80_fwd.md):
//   d 32, 64:   128 x 128, 4 warps (O 32..64 + S 128 registers). At d = 64 ptxas spills 144 B
//               (sm_80) / 156 B (sm_90a) per thread, yet it ran 2.5-4% faster on the H200 than
//               128 x 64 without spills: per-block costs (barriers, row reductions, O rescale)
//               are halved per MMA. 8 warps of 16 rows (231 registers, no spills) ran 25 %
//               slower: each K and V fragment then feeds one m16 tile instead of two.
//   d 96, 128:  128 x 64, 4 warps (O 96..128 + S 64); d = 128 spills 48 B.
//   d 192, 256: one m16 tile per warp (O 96..128 + S 32) either way; the CTA size follows the
//               shared memory (Q + K + V = (block_m + 2 block_n) * d * 2 bytes, at d = 256):
//               - a 163 KB sm80 CTA (A100, 164 KB per SM): 128 x 64, 8 warps, 128 KB (d = 192:
//                 96 KB), one CTA per SM (8 warps x 248 registers fill the register file);
//               - a 227 KB sm90 CTA (228 KB per SM): 64 x 64, 4 warps, 96 KB (72 KB), so two
//                 CTAs share an SM and one's copies, barriers and epilogue overlap the other's
//                 MMAs (ncu at d = 256, N = 512: 128 x 64 kept the tensor pipes 35 % busy,
//                 FA2's 64 x 64 45 %);
//               - under 128 KB (sm86, sm89: 99 KB) 64 x 64 too, the shape that fits.
constexpr FwdTileShape fwd_tile_shape(int head_dim, int smem_limit) {
  if (head_dim <= 64) return {128, 128, 4};
  if (head_dim <= 128) return {128, 64, 4};
  if (smem_limit >= kSm80SmemLimit && smem_limit < kSm90SmemLimit) return {128, 64, 8};
  return {64, 64, 4};
}

// True when the tile shape depends on the shared memory a CTA may have (so a second kernel is
// worth compiling for it).
constexpr bool fwd_shape_depends_on_smem(int head_dim) {
  return !(fwd_tile_shape(head_dim, kSm80SmemLimit) == fwd_tile_shape(head_dim, kSm90SmemLimit));
}

// kSmemLimit: the shared memory a CTA may have on the devices the kernel is for.
template <class ElemT, int kHeadDim, int kSmemLimit = kSm90SmemLimit>
struct FwdTraits {
  using Elem = ElemT;
  static constexpr FwdTileShape kShape = fwd_tile_shape(kHeadDim, kSmemLimit);
  static constexpr int kD = kHeadDim;
  static constexpr int kBlockM = kShape.block_m;
  static constexpr int kBlockN = kShape.block_n;
  static constexpr int kWarps = kShape.warps;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kMmaM = kBlockM / (16 * kWarps);  // m16 row tiles per warp
  static constexpr int kRowsPerWarp = 16 * kMmaM;
  // ldmatrix fragments in flight ahead of the mma that use them (fwd_mainloop.cuh). With one m16
  // tile per warp (d 192 and 256) a K or V fragment feeds 2 mma, so one ahead left a median of 11
  // instructions between a load and its mma at d = 256, 58 of a block's 256 mma under 8 (FA2's
  // kernel: 25, none; scripts/sass-loop --ldsm). Three ahead: 16 and 2, 251 registers, no
  // spills (two ahead spilled 8 B; four gave three's SASS). Two m16 tiles: one ahead suffices.
  static constexpr int kFragsAhead = kMmaM == 1 ? 3 : 1;
  // FA2's order at one m16 tile a warp (d 192, 256) and at d <= 64: the softmax after the V wait
  // and the next K copy's issue, so that the copy's address registers are followed by the
  // softmax's FP work rather than the P V ldmatrix: d = 256 +2.5-4.2 % on an H100 (sm80_fwd.md,
  // v17), d = 64 +2.3-3.9 % (v20), d = 32 -0.3..+9.0 % (v21; its spills 24 / 68 B -> none). At
  // d = 128 ptxas spills with it (local accesses in the loop 5 -> 13).
  static constexpr bool kSoftmaxAfterCopy = kMmaM == 1 || kD <= 64;
  // At one m16 tile a warp, the V copy issued after Q K^T's first k step instead of before it
  // (fwd_mainloop.cuh, gemm_qk's callback): the fast path 16 instructions shorter at d = 256,
  // +0.3-6.3 % on an H100 in two calls, one row flat (sm80_fwd.md, v18). Spread further, in parts
  // among the mma, it lost up to 5 % at N = 512 (v19). With two m16 tiles ptxas spills with it
  // (local accesses in the loop: d = 64 3 -> 20, d = 128 5 -> 8).
  static constexpr bool kVCopyInQk = kMmaM == 1;
  // The softmax's held max (fwd_softmax.cuh, kStaleMaxSlack): measured -3..+3 % here at d = 64,
  // 128 and 256 (docs/kernels/sm80_fwd.md, v7), so off.
  static constexpr bool kStaleMax = false;
  // The mask's per-row forms (fwd_softmax.cuh, apply_mask): d = 64 causal N 1k +1.7 %, d = 128
  // and 256 flat (docs/kernels/sm90_fwd.md, v35).
  static constexpr bool kMaskRowForms = true;
  // copy_tile_async's one shared base per thread (smem_copy.cuh): d = 64 lost its 76 / 72 B of
  // spills with it and d = 256 +3-9 % (with kFragsAhead), but at d = 128 ptxas spilled softmax
  // values in its place (40 / 56 -> 68 / 52 B) and took back the +3.5-5.9 % the mask's block
  // test gave at N 512 / 1k (docs/kernels/sm80_fwd.md, v9-v12 measured), so d = 128 computes
  // each unit's address.
  static constexpr bool kCopySharedBase = kHeadDim != 128;
  using QTile = ptx::SwizzledTile<kBlockM, kD / 8>;
  using KvTile = ptx::SwizzledTile<kBlockN, kD / 8>;
  static constexpr int kSmemBytes = QTile::kBytes + 2 * KvTile::kBytes;

  static_assert(kD % 32 == 0, "head dim must be a multiple of 32 (64-byte smem rows)");
  static_assert(kBlockM % (16 * kWarps) == 0, "whole m16 tiles per warp");
  static_assert(kBlockN % 16 == 0, "whole k16 steps in P V");
  static_assert(QTile::kUnitsTotal % kThreads == 0 && KvTile::kUnitsTotal % kThreads == 0,
                "every thread copies the same number of 16-byte units");
};

}  // namespace flashkit::cuda::sm80
