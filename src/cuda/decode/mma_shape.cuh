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

// CTA shapes the dispatch picks from (decode_launch.cuh): 2 warps when the grid has enough CTAs
// to fill the SMs 4 deep, 4 warps when it is small (one wave of 2 per SM holds the same bytes in
// flight with half the CTAs).
using MmaWarpCounts = std::integer_sequence<int, 2, 4>;
// Head dims on tensor cores; d 256 stays on the CUDA-core kernel (q as hi + lo and O^T alone
// would take 128 registers per lane, and it spills).
using MmaHeadDims = std::integer_sequence<int, 64, 128>;

template <class KvElem, int kHeadDim, int kWarpsPerCta>
struct MmaShape {
  static constexpr bool kFp8 = std::is_same_v<KvElem, __nv_fp8_e4m3>;
  // mma operand type: the pages' own 16-bit type, f16 for e4m3 (every e4m3 value is an f16).
  using MmaElem = std::conditional_t<std::is_same_v<KvElem, __nv_bfloat16>, __nv_bfloat16, __half>;
  static constexpr int kRowsPerCta = 8;  // query rows: n of the P.V mma
  static constexpr int kHeadDimV = kHeadDim;
  static constexpr int kStepKeys = 16;           // keys per warp step: k of the P.V mma
  static constexpr int kSlices = kHeadDim / 16;  // k slices of Q K^T, m tiles of V^T P^T
  // A K (or V) row is kChunks 16-byte chunks; a warp copies a step's tile of each with
  // kPiecesPerLane cp.async per lane (d 128 bf16: 16 chunks, 8 per lane).
  static constexpr int kRowBytes = kHeadDim * int(sizeof(KvElem));
  static constexpr int kChunks = kRowBytes / 16;
  static constexpr int kTileBytes = kStepKeys * kRowBytes;
  static constexpr int kPiecesPerLane = kStepKeys * kChunks / 32;
  // Copy ring: kStages - 1 steps in flight per warp while it computes one. d 128 bf16: 8 KB per
  // step, so 2 CTAs of 4 warps or 4 of 2 keep 128 KB per SM in flight, 3.6x what Little's law
  // asks (4.55 TB/s / 132 SMs x ~1 us loaded latency = 35 KB).
  static constexpr int kStages = 3;
  static constexpr int kWarps = kWarpsPerCta;
  static constexpr int kThreads = 32 * kWarps;
  // One stage of one warp: the K tile, the V tile, then (e4m3) 16 K scales and 16 V scales.
  static constexpr int kStageBytes = 2 * kTileBytes + (kFp8 ? 2 * kStepKeys * 4 : 0);
  static constexpr int kRingBytes = kWarps * kStages * kStageBytes;
  // After the loop the ring holds each warp's normalised rows and lse for the CTA's merge.
  static constexpr int kMergeBytes = kWarps * kRowsPerCta * (kHeadDim + 1) * 4;
  static constexpr int kSmemBytes = kRingBytes > kMergeBytes ? kRingBytes : kMergeBytes;
  // CTAs per SM: at most 8 warps, so that each thread may hold 255 registers (d 128: ~170 for
  // q as hi + lo, O^T and the fragments of a step in flight), and what the shared memory holds.
  static constexpr int kSmemBlocks = 227 * 1024 / kSmemBytes;
  static constexpr int kRegisterBlocks = 8 / kWarps;
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
  static_assert(kPiecesPerLane >= 1 && kStepKeys * kChunks % 32 == 0, "whole pieces per lane");
  static_assert(kFp8 ? kSlices % 2 == 0 : true, "e4m3 loads two k slices per ldmatrix.x4");
  static_assert(kMinBlocks >= 1, "the ring must fit one SM");
};

}  // namespace flashkit::cuda::decode
