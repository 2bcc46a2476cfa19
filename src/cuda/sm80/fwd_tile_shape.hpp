// The one place that sizes the sm80 forward's tiles, per head dim. Everything else (shared
// memory, fragments per warp, grid) derives from this function.
#pragma once

#include "cuda/ptx/swizzle.hpp"

namespace flashkit::cuda::sm80 {

struct FwdTileShape {
  int block_m;  // query rows per CTA
  int block_n;  // keys per KV block
  int warps;    // each warp owns block_m / warps whole rows, so row max/sum stay in the warp
};

// Per thread the O accumulator holds block_m * d / (32 * warps) fp32 values and the S block
// block_m * block_n / (32 * warps); both must fit in 255 registers with room for addresses and
// fragments (ptxas -v, docs/kernels/sm80_fwd.md):
//   d 32, 64:   128 x 128, 4 warps (O 32..64 + S 128 registers). At d = 64 ptxas spills 144 B
//               (sm_80) / 156 B (sm_90a) per thread, yet it ran 2.5-4% faster on the H200 than
//               128 x 64 without spills: per-block costs (barriers, row reductions, O rescale)
//               are halved per MMA.
//   d 96, 128:  128 x 64, 4 warps (O 96..128 + S 64); d = 128 spills 48 B.
//   d 192, 256: 128 x 64, 8 warps, one m16 tile per warp (O 96..128 + S 32).
// Shared memory is Q + K + V = (block_m + 2 block_n) * d * 2 bytes: 128 KB at d = 256, inside
// sm80's 163 KB and sm90's 227 KB per CTA.
constexpr FwdTileShape fwd_tile_shape(int head_dim) {
  if (head_dim <= 64) return {128, 128, 4};
  if (head_dim <= 128) return {128, 64, 4};
  return {128, 64, 8};
}

template <class ElemT, int kHeadDim>
struct FwdTraits {
  using Elem = ElemT;
  static constexpr FwdTileShape kShape = fwd_tile_shape(kHeadDim);
  static constexpr int kD = kHeadDim;
  static constexpr int kBlockM = kShape.block_m;
  static constexpr int kBlockN = kShape.block_n;
  static constexpr int kWarps = kShape.warps;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kMmaM = kBlockM / (16 * kWarps);  // m16 row tiles per warp
  static constexpr int kRowsPerWarp = 16 * kMmaM;
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
