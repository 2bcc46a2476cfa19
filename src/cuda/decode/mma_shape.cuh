// The tensor-core decode kernel's shape (v3) from (KV element type, head dim, warps per CTA): a
// warp step of 16 keys, the copy ring of whole K/V tiles and its swizzle, and the CTA's shared
// memory. Scores are S = Q K^T with m16n8k16 mma.sync (query rows padded to m = 16, 8 keys per
// n tile), and P.V runs transposed, O^T = V^T P^T (head dim in m tiles of 16, the CTA's 8 query
// rows as n = 8, the step's 16 keys as k): P leaves the score accumulators already in the B
// fragment layout, and every query row of a GQA group of up to 8 shares each K/V load.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <type_traits>

namespace flashkit::cuda::decode {

// CTA shapes (warps per CTA) the dispatch picks from (paged_attention.cu: the most warps per SM
// that still run the whole grid in one wave; 8 warps, 192 KB of ring at d 128, where a task's two
// key splits would otherwise be two 4-warp CTAs).
using MmaWarpCounts = std::integer_sequence<int, 2, 3, 4, 8>;
// Head dims on tensor cores; d 256 stays on the CUDA-core kernel (q as hi + lo and O^T alone
// would take 128 registers per lane, and it spills).
using MmaHeadDims = std::integer_sequence<int, 64, 128>;

// Whether the CTA shape has an instance that folds prior states into its output (cascade's
// suffix level, mma_kernel.cuh's kFold): f16 and bf16 pages (the shared level of an e4m3 cache
// runs on these kernels too, and merges), at the warp counts an unsplit plan picks (8 only
// replaces two splits).
template <class KvElem>
constexpr bool mma_folds(int warps) {
  return !std::is_same_v<KvElem, __nv_fp8_e4m3> && warps >= 2 && warps <= 4;
}

template <class KvElem, int kHeadDim, int kWarpsPerCta>
struct MmaShape {
  static constexpr bool kFp8 = std::is_same_v<KvElem, __nv_fp8_e4m3>;
  // mma operand type: the pages' own 16-bit type, f16 for e4m3 (every e4m3 value is an f16).
  using MmaElem = std::conditional_t<std::is_same_v<KvElem, __nv_bfloat16>, __nv_bfloat16, __half>;
  static constexpr int kRowsPerCta = 8;  // query rows: n of the P.V mma
  static constexpr int kHeadDimV = kHeadDim;
  // Keys per warp step: kKeyGroups groups of 16 (each the k of one P.V mma). e4m3 steps are 32
  // keys, so that a step moves a bf16 step's bytes (d 128: 8 KB): v3.1 found e4m3 paced by its
  // steps, not by its bytes in flight (a 5-deep ring of 16-key steps ran as fast as 3 deep), so
  // a step's fixed work (page ids, waits, row max, rescale) is paid per 32 keys there.
  static constexpr int kKeyGroups = kFp8 ? 2 : 1;
  static constexpr int kStepKeys = 16 * kKeyGroups;
  static constexpr int kSlices = kHeadDim / 16;  // k slices of Q K^T, m tiles of V^T P^T
  // A K (or V) row is kChunks 16-byte chunks; a warp copies a step's tile of each with
  // kPiecesPerLane cp.async per lane (d 128 bf16: 16 chunks, 8 per lane).
  static constexpr int kRowBytes = kHeadDim * int(sizeof(KvElem));
  static constexpr int kChunks = kRowBytes / 16;
  static constexpr int kTileBytes = kStepKeys * kRowBytes;
  static constexpr int kPiecesPerLane = kStepKeys * kChunks / 32;
  static constexpr int kWarps = kWarpsPerCta;
  static constexpr int kThreads = 32 * kWarps;
  // One stage of one warp: the K tile, the V tile, then (e4m3) kStepKeys K scales and as many V
  // scales.
  static constexpr int kStageBytes = 2 * kTileBytes + (kFp8 ? 2 * kStepKeys * 4 : 0);
  // Copy ring: kStages - 1 steps in flight per warp while it computes one, ~24 KB of ring per
  // warp whatever a step weighs (d 128 bf16: 3 stages of 8 KB). Measured (v3.0): the bf16 rate
  // follows the bytes in flight per SM, far past Little's law with a 1-us latency. e4m3 at d 128
  // takes 2 stages of 8.25 KB: its warps wait mostly on their own dependent instructions, not on
  // memory (v3.14, ncu), and 2 stages at 8 warps per SM read 1-3 % more than 3 (4 stages at 6
  // warps 10 % less, 10 warps 2.4 % less; bf16 flat); d 64's e4m3 ring (5 stages of 4.25 KB) was
  // not measured.
  static constexpr int kRingTarget = 24 * 1024;
  static constexpr int kStagesFit = kRingTarget / kStageBytes;
  static constexpr int kStages =
      kFp8 && kHeadDim >= 128 ? 2 : (kStagesFit < 3 ? 3 : (kStagesFit > 8 ? 8 : kStagesFit));
  static constexpr int kRingBytes = kWarps * kStages * kStageBytes;
  // After the loop the ring holds each warp's normalised rows and lse for the CTA's merge.
  static constexpr int kMergeBytes = kWarps * kRowsPerCta * (kHeadDim + 1) * 4;
  static constexpr int kSmemBytes = kRingBytes > kMergeBytes ? kRingBytes : kMergeBytes;
  // CTAs per SM: what the shared memory holds, and 2 warps per scheduler (a scheduler's 64 KB
  // of registers holds 2 warps of <= 256 registers; d 128 uses ~190: q as hi + lo, O^T, a
  // step's fragments. 3 per scheduler would cap them at 168 and spill). The launch bounds
  // promise it with an sm90's 227 KB; paged_attention.cu sizes its waves with the device's.
  static constexpr int kSmemBlocks = 227 * 1024 / kSmemBytes;
  static constexpr int kRegisterBlocks = 4 * 2 / kWarps;
  static constexpr int kMinBlocks = kSmemBlocks < kRegisterBlocks ? kSmemBlocks : kRegisterBlocks;

  // 16-byte unit of (row, chunk) in a tile. ldmatrix reads one chunk of 8 consecutive rows: the
  // XOR puts them in 8 different 16-byte bank groups (rows >= 128 B apart would all hit one).
  __device__ static constexpr int swizzle(int row, int chunk) {
    if constexpr (kChunks >= 8) {
      return row * kChunks + (chunk ^ (row & 7));
    } else {
      return row * kChunks + (chunk ^ ((row / (8 / kChunks)) & (kChunks - 1)));
    }
  }

  static_assert(kChunks >= 4 && (kChunks & (kChunks - 1)) == 0, "rows of 4, 8, ... chunks");
  static_assert(kPiecesPerLane >= 1 && 32 % kChunks == 0, "whole rows per warp-wide copy");
  static_assert(kFp8 ? kSlices % 2 == 0 : true, "e4m3 loads two k slices per ldmatrix.x4");
  static_assert(kMinBlocks >= 1, "the ring must fit one SM");
};

// A CTA shape's resources for the host's wave sizing: its shared memory, and how many of it one
// SM's registers hold (the SM's shared memory is the device's: paged_attention.cu divides it).
struct MmaFootprint {
  int smem_bytes = 0, register_blocks = 0;
};
template <class KvElem, int kHeadDim, int... kWarps>
constexpr MmaFootprint mma_footprint(std::integer_sequence<int, kWarps...>, int warps) {
  MmaFootprint f;
  ((f = warps == kWarps ? MmaFootprint{MmaShape<KvElem, kHeadDim, kWarps>::kSmemBytes,
                                       MmaShape<KvElem, kHeadDim, kWarps>::kRegisterBlocks}
                        : f),
   ...);
  return f;
}

}  // namespace flashkit::cuda::decode
