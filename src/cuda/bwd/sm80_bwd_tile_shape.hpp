// The one place that sizes the tensor-core backward's tiles, per head dim. Everything else
// (shared memory, fragments per warp, grids) derives from these two functions.
#pragma once

#include "cuda/common/smem_limits.hpp"
#include "cuda/ptx/swizzle.hpp"

namespace flashkit::cuda::sm80 {

// How a CTA's warps cover one GEMM's output: `rows` warps along its rows, `cols` along its
// columns (warp w owns row group w / cols and column group w % cols).
struct WarpGrid {
  int rows, cols;
};

// The dK/dV kernel: a CTA owns block_n keys of one KV head; query blocks of block_m rows stream
// past. Its three output shapes each get a warp grid:
//   sdp: S^T and dP^T, [block_n x block_m];  dkv: dK and dV, [block_n x d];  dq: [block_m x d].
struct BwdTileShape {
  int block_n, block_m, warps;
  WarpGrid sdp, dkv, dq;
};

// Per thread the dK and dV accumulators hold 2 * block_n * d / (32 * warps) fp32 values and S^T,
// dP^T another 2 * block_n * block_m / (32 * warps) while they are live (ptxas -v figures in
// docs/kernels/sm80_bwd.md):
//   d = 64:   128 keys x 128 queries, 8 warps: dK + dV 64 registers, S^T + dP^T 128 (FA2's sm80
//             shape for d = 64): twice the queries per step halve the per-step costs (barriers,
//             copies' address math, row statistics) against 128 x 64.
//   d = 32, 96, 128: 128 x 64: dK + dV 32..128 registers, S^T + dP^T 64 (FA2's sm80 shape for
//             d = 128; at d = 32, 128 x 128 spills 48 bytes).
//   d = 192:  64 x 64: dK + dV 96, S^T + dP^T 32.
//   d = 256:  64 x 32 within sm80's 163 KB: dK + dV 128, S^T + dP^T 16, 137 KB with
//             double-buffered Q and dO; 64 x 64 (208 KB) where a CTA may have 227 KB (sm90).
// Warp grids: a warp's share of each GEMM is 32 x 32 or larger where the shape allows (d <= 64
// and d = 128 S^T; 32 x 48..64 for dK/dV at d >= 192 and dQ at d >= 128), so each x4 ldmatrix
// feeds 2 or more mma: 16 x 96 at d = 192, for instance, needs 7 loads per 12 mma, 32 x 48 five.
// Shared memory: K, V (block_n x d), P^T and dS^T (block_n x block_m), two stages of Q and dO
// (block_m x d), all 16-bit: 160 KB at d = 128 and 192.
constexpr BwdTileShape bwd_tile_shape(int head_dim, int smem_limit) {
  if (head_dim <= 32) return {128, 64, 8, {4, 2}, {4, 2}, {4, 2}};
  if (head_dim <= 64) return {128, 128, 8, {4, 2}, {4, 2}, {4, 2}};
  if (head_dim <= 96) return {128, 64, 8, {4, 2}, {4, 2}, {4, 2}};  // 96 / 4 is no n16 multiple
  if (head_dim <= 128) return {128, 64, 8, {4, 2}, {4, 2}, {2, 4}};
  if (head_dim <= 192) return {64, 64, 8, {4, 2}, {2, 4}, {2, 4}};
  if (smem_limit >= kSm90SmemLimit) return {64, 64, 8, {4, 2}, {2, 4}, {2, 4}};
  return {64, 32, 8, {4, 2}, {4, 2}, {2, 4}};
}

// True when a CTA with more shared memory gets a different shape (so a second kernel is worth
// compiling for it).
constexpr bool bwd_shape_grows_with_smem(int head_dim) {
  const BwdTileShape a = bwd_tile_shape(head_dim, kSm80SmemLimit);
  const BwdTileShape b = bwd_tile_shape(head_dim, kSm90SmemLimit);
  return a.block_n != b.block_n || a.block_m != b.block_m || a.warps != b.warps;
}

// The deterministic dQ kernel (no atomics): a CTA owns block_m queries of one head, one m16 tile
// per warp, KV blocks of block_n keys stream past. dQ holds block_m * d / (32 * warps) = d / 2
// registers per thread, S and dP 2 * 16 * block_n / 32.
struct DqTileShape {
  int block_m, block_n, warps;
};
constexpr DqTileShape dq_tile_shape(int head_dim) {
  if (head_dim <= 128) return {128, 64, 8};
  return {64, 32, 4};  // dQ alone is 96..128 registers
}

// How a kernel's warp GEMMs spend registers (sm80_warp_gemm.cuh): kOperandBases keeps one address
// register per operand (and per run of P^T / dS^T stores) for fewer instructions; kAhead loads
// every fragment one use ahead, a second fragment set live, so ldmatrix runs under the mma.
template <bool kOperandBasesV, bool kAheadV>
struct GemmForm {
  static constexpr bool kOperandBases = kOperandBasesV, kAhead = kAheadV;
};

// kSmemLimit: the shared memory a CTA may have on the devices the kernel is for.
template <class ElemT, int kHeadDim, int kSmemLimit = kSm80SmemLimit>
struct BwdTraits {
  using Elem = ElemT;
  static constexpr BwdTileShape kShape = bwd_tile_shape(kHeadDim, kSmemLimit);
  static constexpr int kD = kHeadDim;
  static constexpr int kBlockN = kShape.block_n;
  static constexpr int kBlockM = kShape.block_m;
  static constexpr int kWarps = kShape.warps;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kStages = 2;  // Q/dO buffers: the next block's copy overlaps this block
  // Measured on the H200 (docs/kernels/sm80_bwd.md v6): operand bases +1.5 % at d = 64, +2.5-3 %
  // at d = 128, but -8 % at d = 256, where dK + dV hold 128 registers and the bases spill 80 B;
  // fragments ahead +1.5-1.9 % at d = 256, -2 % at d = 64 (56 B spilled) and below the bases'
  // gain at d = 128.
  using Gemm = GemmForm<(kHeadDim < 256), (kHeadDim >= 256)>;

  // Per-warp sub-tiles of the three GEMM outputs: rows (multiple of 16) x columns (of 16).
  static constexpr int kSdpRows = kBlockN / kShape.sdp.rows, kSdpCols = kBlockM / kShape.sdp.cols;
  static constexpr int kDkvRows = kBlockN / kShape.dkv.rows, kDkvCols = kD / kShape.dkv.cols;
  static constexpr int kDqRows = kBlockM / kShape.dq.rows, kDqCols = kD / kShape.dq.cols;

  using QTile = ptx::SwizzledTile<kBlockM, kD / 8>;       // Q and dO
  using KvTile = ptx::SwizzledTile<kBlockN, kD / 8>;      // K and V
  using PTile = ptx::SwizzledTile<kBlockN, kBlockM / 8>;  // P^T and dS^T
  static constexpr int kKOffset = 0;
  static constexpr int kVOffset = KvTile::kBytes;
  static constexpr int kPOffset = 2 * KvTile::kBytes;
  static constexpr int kDsOffset = kPOffset + PTile::kBytes;
  static constexpr int kQOffset = kDsOffset + PTile::kBytes;  // stage s: Q, then dO
  static constexpr int kStageBytes = 2 * QTile::kBytes;
  static constexpr int kRowStatsOffset = kQOffset + kStages * kStageBytes;  // lse, D per stage
  static constexpr int kSmemBytes = kRowStatsOffset + kStages * 2 * kBlockM * 4;

  static_assert(kD % 32 == 0, "head dim must be a multiple of 32 (64-byte smem rows)");
  static_assert(kShape.sdp.rows * kShape.sdp.cols == kWarps &&
                    kShape.dkv.rows * kShape.dkv.cols == kWarps &&
                    kShape.dq.rows * kShape.dq.cols == kWarps,
                "each warp grid covers every warp once");
  static_assert(kSdpRows % 16 == 0 && kDkvRows % 16 == 0 && kDqRows % 16 == 0,
                "whole m16 tiles per warp");
  static_assert(kSdpCols % 16 == 0 && kDkvCols % 16 == 0 && kDqCols % 16 == 0,
                "B fragments come in pairs of n8 tiles");
  static_assert(kBlockM % 16 == 0 && kBlockN % 16 == 0, "whole k16 steps");
  static_assert(QTile::kUnitsTotal % kThreads == 0 && KvTile::kUnitsTotal % kThreads == 0,
                "every thread copies the same number of 16-byte units");
  static_assert(kBlockM <= kThreads, "one thread per query row loads lse and D");
  static_assert(kSmemBytes <= kSmemLimit, "fits the CTA's shared memory");
  static_assert(4 * KvTile::kBytes <= kSmemBytes, "the epilogue stages dK and dV in f32");
};

template <class ElemT, int kHeadDim>
struct DqTraits {
  using Elem = ElemT;
  static constexpr DqTileShape kShape = dq_tile_shape(kHeadDim);
  static constexpr int kD = kHeadDim;
  static constexpr int kBlockM = kShape.block_m;
  static constexpr int kBlockN = kShape.block_n;
  static constexpr int kWarps = kShape.warps;
  static constexpr int kThreads = 32 * kWarps;
  using Gemm = GemmForm<false, false>;
  using QTile = ptx::SwizzledTile<kBlockM, kD / 8>;   // Q and dO
  using KvTile = ptx::SwizzledTile<kBlockN, kD / 8>;  // K and V, two stages
  static constexpr int kSmemBytes = 2 * QTile::kBytes + 4 * KvTile::kBytes;

  static_assert(kBlockM == 16 * kWarps, "one m16 tile per warp");
  static_assert(kBlockN % 16 == 0, "whole k16 steps and B fragment pairs");
  static_assert(QTile::kUnitsTotal % kThreads == 0 && KvTile::kUnitsTotal % kThreads == 0,
                "every thread copies the same number of 16-byte units");
  static_assert(kSmemBytes <= kSm80SmemLimit, "fits an sm80 CTA's shared memory");
};

}  // namespace flashkit::cuda::sm80
