// The decode kernel's shape from (KV element type, head dim, query rows per CTA): how a warp's
// lanes cover K/V rows with 16-byte pieces, how many keys one step streams, the depth of the
// copy ring, the CTA's warps and shared memory. And the compiled variant matrix, listed once.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>
#include <utility>

namespace flashkit::cuda::decode {

// Compiled variants: head dims x query rows per CTA, per KV dtype (f16, bf16: 3 x 4; e4m3:
// 3 x 3), 33 kernels. Dispatch reads these same lists (decode_launch.cuh), so trimming one trims
// the build and the accepted calls.
using HeadDims = std::integer_sequence<int, 64, 128, 256>;
// e4m3 stops at 4 rows: 8 rows of 16-element slices need 256 registers for q and o alone.
template <class KvElem>
using RowTiles =
    std::conditional_t<std::is_same_v<KvElem, __nv_fp8_e4m3>, std::integer_sequence<int, 1, 2, 4>,
                       std::integer_sequence<int, 1, 2, 4, 8>>;

template <int... kValues>
constexpr int last_of(std::integer_sequence<int, kValues...>) {
  constexpr int values[] = {kValues...};
  return values[sizeof...(kValues) - 1];
}
template <class KvElem>
constexpr int kMaxRowsPerCta = last_of(RowTiles<KvElem>{});

// Query rows one CTA keeps in registers: a sequence's q_len * group rows of one KV head, rounded
// up to a power of two, at most `max_rows` (more rows run as more CTAs, which re-read K/V from
// L2).
constexpr int rows_per_cta(std::int64_t rows, int max_rows) {
  const int r = rows <= 1 ? 1 : rows <= 2 ? 2 : rows <= 4 ? 4 : 8;
  return r < max_rows ? r : max_rows;
}

template <class KvElem, int kHeadDim, int kRows>
struct DecodeShape {
  static constexpr bool kFp8 = std::is_same_v<KvElem, __nv_fp8_e4m3>;
  static constexpr int kRowsPerCta = kRows;
  static constexpr int kHeadDimV = kHeadDim;
  // One 16-byte piece per lane per K (and V) row: 8 f16/bf16 or 16 e4m3 elements.
  static constexpr int kLaneElems = 16 / int(sizeof(KvElem));
  // Lanes that share a row (d = 128 bf16: 256 bytes, 16 lanes) and rows per warp-wide copy.
  static constexpr int kRowLanes = kHeadDim / kLaneElems;
  static constexpr int kRowsPerLoad = 32 / kRowLanes;
  // Rows per lane per step. 4 keeps the per-step softmax bookkeeping (one block max, one rescale
  // per row) small next to the 2 x 4 x kRows x kLaneElems FMAs; 8 query rows halve it to hold
  // the dot products in registers. A step is capped at 16 keys so that with pages of >= 16
  // tokens (BENCH.md's 16) it lies inside one page: one block-table read per step.
  static constexpr int kMaxUnroll = kRows <= 4 ? 4 : 2;
  static constexpr int kUnroll = kMaxUnroll < 16 / kRowsPerLoad ? kMaxUnroll : 16 / kRowsPerLoad;
  static constexpr int kStepKeys = kRowsPerLoad * kUnroll;
  // Dot products per step and lane (value n = u + kUnroll * r: row u of the step, query row r).
  static constexpr int kDots = kUnroll * kRows;
  // Copy ring depth: kStages - 1 steps in flight per warp while it computes one. d = 128 bf16:
  // 2 x 4 KB per warp, so even two CTAs of 4 warps per SM keep 64 KB in flight, 1.8x what
  // Little's law asks of an H200 SM (4.55 TB/s / 132 SMs x ~1 us loaded latency = 35 KB); and the
  // ring is 48 KB, so four CTAs fit an SM (with <= 128 registers): BENCH.md's batch-64 grid of 512
  // CTAs runs in one wave.
  static constexpr int kStages = 3;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  // Dynamic shared memory: the ring ({K, V} x kUnroll pieces of 16 B, and their f32 e4m3 scales,
  // per lane, stage and warp), reused after the loop for the warps' merge (kRows x kHeadDim f32
  // per warp, then kRows lse).
  static constexpr int kRingPieces = kWarps * kStages * 2 * kUnroll * 32;
  static constexpr int kRingBytes = kRingPieces * 16 + (kFp8 ? kRingPieces * 4 : 0);
  static constexpr int kMergeBytes = kWarps * kRows * (kHeadDim + 1) * 4;
  static constexpr int kSmemBytes = kRingBytes > kMergeBytes ? kRingBytes : kMergeBytes;
  // CTAs per SM the register budget is held to (launch bounds): 4 where the q and o slices
  // leave room in 128 registers (up to 4 rows of 8 elements), else 2; never more than fit the
  // shared memory (227 KB per SM on sm90).
  static constexpr int kRegisterBlocks = kRows * kLaneElems <= 32 ? 4 : 2;
  static constexpr int kSmemBlocks = 227 * 1024 / kSmemBytes;
  static constexpr int kMinBlocks = kRegisterBlocks < kSmemBlocks ? kRegisterBlocks : kSmemBlocks;

  static_assert(kHeadDim % kLaneElems == 0 && kRowLanes <= 32 && 32 % kRowLanes == 0,
                "a K/V row must be covered by a power-of-two number of lanes of one warp");
  static_assert(kStepKeys <= 16 && (kStepKeys & (kStepKeys - 1)) == 0,
                "steps are a power of two, at most 16 keys (one page of 16)");
  static_assert(kUnroll <= kRowLanes, "a group's lanes must hold every row of a step");
  static_assert(kMinBlocks >= 2, "two CTAs per SM overlap one's epilogue with the other's loads");
};

}  // namespace flashkit::cuda::decode
