// The tensor-core decode mainloop (v3): the CTA's warps stream its keys in steps of 16 keys
// (e4m3: 32, two groups of 16; warp w takes steps w, w + kWarps, ...). A warp cp.asyncs a
// step's K and V tiles (and e4m3 scales) into its own stage of a kStages-deep shared-memory
// ring, kStages - 1 steps ahead, then, per 16-key group:
//   S = Q K^T      2 n tiles x kSlices mma.sync (x2 when q is not the mma type: q = hi + lo)
//   softmax        lane (g, t) owns query row g, keys 2t, 2t + 1, 2t + 8, 2t + 9: 4 scores,
//                  a 4-lane max (one per step), no other reduction until the end
//   O^T += V^T P^T kSlices x 2 mma.sync (p = hi + lo), P straight from the score registers.
// Per 16 keys of d 128 bf16 that is ~48 mma, 16 ldmatrix and 16 cp.async per warp, where the
// CUDA-core kernel (decode_mainloop.cuh) issues ~900 instructions: the loop no longer limits
// the rate at which a warp can consume bytes, and e4m3 pays one cvt per two elements.
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/mask_rules.hpp"
#include "core/softmax_state.hpp"
#include "cuda/common/dtype.cuh"
#include "cuda/decode/decode_cta.cuh"
#include "cuda/decode/decode_mainloop.cuh"
#include "cuda/decode/decode_params.hpp"
#include "cuda/decode/kv_copy.cuh"
#include "cuda/decode/mma_fragments.cuh"
#include "cuda/ptx/convert.cuh"
#include "cuda/ptx/cp_async.cuh"
#include "cuda/ptx/mma.cuh"
#include "cuda/ptx/warp_reduce.cuh"

namespace flashkit::cuda::decode {

// The power of two just above `x` (> 0, finite, normal): 2^(exponent + 1).
__device__ __forceinline__ float power_of_two_above(float x, float& log2) {
  const int e = int((__float_as_uint(x) >> 23) & 0xffu) - 126;
  log2 = float(e);
  return __uint_as_float(std::uint32_t(e + 127) << 23);
}

// What a lane keeps for the whole loop: query row g = lane / 4 of the CTA's tile.
template <class Shape>
struct MmaLane {
  using Elem = typename Shape::MmaElem;
  static constexpr int kSlices = Shape::kSlices;
  std::uint32_t q_hi[kSlices][2], q_lo[kSlices][2];  // A regs 0 and 2 of row g (rows g + 8: 0)
  bool q_exact;  // the warp's q_lo are all zeros (q is the mma type, or bf16 in f16's range)
  // f16 operands (e4m3 pages): q enters the products as q / q_ref, q_ref a power of two that
  // keeps it below 2^14 (f16 overflows at 65504; bf16 or f32 q may not), 1 almost always; the
  // scores take it back.
  float q_ref = 1.0f;
  float o[kSlices][4];                // O^T: rows o_dim(s, 0 / 1, g), columns rows 2t, 2t + 1
  core::SoftmaxState<float> softmax;  // row g: m (the same in the quad), l (this lane's keys)
  std::int64_t diag;                  // causal diagonal of row g
  float slope;                        // ALiBi slope of row g
  // e4m3: o holds O^T / v_ref, where v_ref = 2^v_ref_log2 (the same in the warp) is at least
  // every V scale seen so far, so that the probabilities fed to P V, p * v_scale / v_ref, stay
  // in (0, 1] where f16's 11 bits (and the lo half) hold them. Folding the bare scale into p
  // put pages of values ~1e-3 (scales ~2e-6) into f16's subnormals: emulated, relative error
  // 2e-5 at values ~1, 2.1e-2 at 1e-3, 0.29 at 1e-4.
  float v_ref = kMinVRef, v_ref_log2 = kMinVRefLog2;
  // The smallest reference: p / v_ref <= 2^100 keeps a step's l sum far from f32's overflow;
  // pages scaled below 2^-100 (values ~1e-28) are products below 1, read less exactly.
  static constexpr float kMinVRefLog2 = -100.0f;
  static constexpr float kMinVRef = 0x1p-100f;
};

template <class Shape>
__device__ __forceinline__ void mma_load_queries(const PagedParams& p, const DecodeCta& c,
                                                 MmaLane<Shape>& s) {
  using Elem = typename Shape::MmaElem;
  const int lane = int(threadIdx.x % 32), g = lane / 4, t = lane % 4;
  const QueryRow row = query_row(p, c, g);
  const std::int64_t at = core::element_offset(p.q_layout, c.b, c.q_start, row.token, row.head);
  // Every load issued before any is used: one switch on the dtype around all of them. (With the
  // switch per element, each pair's split waited for its loads: 16 round trips at d 128, ~6 us
  // before the first step's math, measured with %globaltimer.)
  float x[Shape::kSlices][2][2];
  const auto load_all = [&](auto elem) {
    using QElem = decltype(elem);
    const QElem* q = static_cast<const QElem*>(p.q) + at;
#pragma unroll
    for (int sl = 0; sl < Shape::kSlices; ++sl) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int j = 0; j < 2; ++j) x[sl][h][j] = to_float(q[q_dim<Shape>(sl, h, t, j)]);
      }
    }
  };
  switch (p.q_dtype) {
    case DType::f16:
      load_all(__half{});
      break;
    case DType::bf16:
      load_all(__nv_bfloat16{});
      break;
    default:
      load_all(float{});
      break;
  }
  if constexpr (std::is_same_v<Elem, __half>) {
    // The warp holds all of the CTA's query rows, so its max is the CTA's.
    float q_max = 0.0f;
#pragma unroll
    for (int sl = 0; sl < Shape::kSlices; ++sl) {
#pragma unroll
      for (int h = 0; h < 2; ++h)
        q_max = fmaxf(q_max, fmaxf(fabsf(x[sl][h][0]), fabsf(x[sl][h][1])));
    }
    q_max = ptx::warp_max(q_max);
    if (q_max >= 0x1p14f) {
      float log2;
      s.q_ref = power_of_two_above(q_max, log2) * 0x1p-14f;
      const float inv = 1.0f / s.q_ref;
#pragma unroll
      for (int sl = 0; sl < Shape::kSlices; ++sl) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          x[sl][h][0] *= inv;
          x[sl][h][1] *= inv;
        }
      }
    }
  }
#pragma unroll
  for (int sl = 0; sl < Shape::kSlices; ++sl) {
#pragma unroll
    for (int h = 0; h < 2; ++h)
      split_pack<Elem>(x[sl][h][0], x[sl][h][1], s.q_hi[sl][h], s.q_lo[sl][h]);
#pragma unroll
    for (int k = 0; k < 4; ++k) s.o[sl][k] = 0.0f;
  }
  // Skip the lo products where they add nothing: always for q of the mma type, and for bf16 q
  // against e4m3 pages (f16 operands) unless some element is outside f16's normal range.
  bool exact = true;
#pragma unroll
  for (int sl = 0; sl < Shape::kSlices; ++sl)
    exact = exact && s.q_lo[sl][0] == 0u && s.q_lo[sl][1] == 0u;
  s.q_exact = __all_sync(0xffffffffu, exact);
  s.softmax = core::SoftmaxState<float>{};
  s.diag = row.diag;
  s.slope = p.alibi_slopes != nullptr
                ? p.alibi_slopes[c.b * p.alibi_batch_stride + row.head * p.alibi_head_stride]
                : 0.0f;
}

template <class KvElem, class Shape>
__device__ __forceinline__ void mma_stream_keys(const PagedParams& p, const DecodeCta& c,
                                                MmaLane<Shape>& s, unsigned char* smem) {
  using Elem = typename Shape::MmaElem;
  constexpr int kStages = Shape::kStages, kStepKeys = Shape::kStepKeys;
  constexpr int kGroups = Shape::kKeyGroups;  // 16-key groups per step
  constexpr int kStride = Shape::kWarps * kStepKeys;
  constexpr int kStageBytes = Shape::kStageBytes, kTileBytes = Shape::kTileBytes;
  // Group g of a tile starts g * kGroupBytes in: swizzle(row + 16, c) = swizzle(row, c) + 16
  // kChunks.
  constexpr int kGroupBytes = 16 * Shape::kRowBytes;
  constexpr int kChunkElems = 16 / int(sizeof(KvElem));
  constexpr int kSliceStep = Shape::kFp8 ? 2 : 1;  // k slices (m tiles) per ldmatrix.x4
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32), t = lane % 4;

  unsigned char* ring = smem + warp * kStages * kStageBytes;
  const std::uint32_t ring_addr = ptx::smem_address(ring);
  const KvElem* k_head = static_cast<const KvElem*>(p.k_pages) + c.kv_head * p.k_strides.head;
  const KvElem* v_head = static_cast<const KvElem*>(p.v_pages) + c.kv_head * p.v_strides.head;
  const std::int32_t* table = p.block_table + c.b * p.table_batch;
  const int shift = p.page_shift, slot_mask = (1 << shift) - 1;
  // Steps start at multiples of kStepKeys, so with pages of >= 16 tokens each 16-key group of a
  // step lies in one page: one block-table read per group (read early, below); smaller pages
  // look each row up.
  const bool group_pages = (1 << shift) >= 16;
  const bool plain_scores = p.mask.softcap == 0.0f && p.alibi_slopes == nullptr;
  const int lo = int(c.keys.lo), hi = int(c.keys.hi);
  auto page_of = [&](int key) { return __ldg(table + (key >> shift) * p.table_page); };

  // This lane's pieces of a step: piece j is row j * kRowsPerPass + lane_row of the tile, chunk
  // lane_chunk (the same chunk for every j), so with pages of >= 16 tokens the sources of a
  // group are one 64-bit base plus multiples of one stride. (v3.2 derived every piece's address
  // from its key: 4 64-bit multiplies and a page-size test per piece pair, ~40 % of the
  // instructions a warp issued per step; ncu showed the issue rate, not the memory, pacing the
  // loop.)
  constexpr int kRowsPerPass = 32 / Shape::kChunks;
  constexpr int kPiecesPerGroup = 16 / kRowsPerPass;
  static_assert(16 % kRowsPerPass == 0, "a pass of rows stays inside one 16-key group");
  const int lane_row = lane / Shape::kChunks, lane_chunk = lane % Shape::kChunks;
  const KvElem* k_lane = k_head + lane_row * p.k_strides.slot + lane_chunk * kChunkElems;
  const KvElem* v_lane = v_head + lane_row * p.v_strides.slot + lane_chunk * kChunkElems;
  const std::int64_t k_pass = kRowsPerPass * p.k_strides.slot;
  const std::int64_t v_pass = kRowsPerPass * p.v_strides.slot;

  // A CTA reads its K and V once (its query rows, a GQA group's, share each load), so their
  // lines are the first L2 evicts: the cascade's suffix level streams 67 MB past an H100's 50 MB
  // of L2 while the shared level beside it reads its prefix twice and both levels' partial
  // states wait for the merge; under the default policy that step took 52.1 us, under this one
  // 45.1 (batch 64, 4k prefix, 256-token suffixes; docs/kernels/decode.md, v3.19).
  const std::uint64_t stream_once = ptx::l2_evict_first_policy();

  // This lane's pieces of the step at `base` into ring stage `stage` (row-major tiles, swizzled
  // chunks), group g's from page pages[g]; rows outside [lo, hi) become zeros without a read
  // (their slots may hold NaN, or have no page). Only a span's first and last steps have such
  // rows.
  auto issue = [&](int base, const int(&pages)[kGroups], int stage) {
    const std::uint32_t k_tile = ring_addr + stage * kStageBytes, v_tile = k_tile + kTileBytes;
    if (group_pages) {
      const bool whole = base >= lo && base + kStepKeys <= hi;
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
        const int slot0 = (base + 16 * g) & slot_mask;
        const KvElem* k_src = k_lane + pages[g] * p.k_strides.page + slot0 * p.k_strides.slot;
        const KvElem* v_src = v_lane + pages[g] * p.v_strides.page + slot0 * p.v_strides.slot;
#pragma unroll
        for (int jg = 0; jg < kPiecesPerGroup; ++jg) {
          const int j = g * kPiecesPerGroup + jg;
          const int row = j * kRowsPerPass + lane_row, key = base + row;
          const bool valid = whole || (key >= lo && key < hi);
          const std::uint32_t at = Shape::swizzle(row, lane_chunk) * 16;
          ptx::cp_async_16(k_tile + at, k_src + jg * k_pass, valid, stream_once);
          ptx::cp_async_16(v_tile + at, v_src + jg * v_pass, valid, stream_once);
        }
      }
    } else {  // pages of 1..8 tokens: each row looks its page up
#pragma unroll
      for (int j = 0; j < Shape::kPiecesPerLane; ++j) {
        const int row = j * kRowsPerPass + lane_row, key = base + row;
        const bool valid = key >= lo && key < hi;
        const int pg = valid ? page_of(key) : 0;
        const int slot = key & slot_mask;
        const std::uint32_t at = Shape::swizzle(row, lane_chunk) * 16;
        ptx::cp_async_16(
            k_tile + at,
            k_head + pg * p.k_strides.page + slot * p.k_strides.slot + lane_chunk * kChunkElems,
            valid, stream_once);
        ptx::cp_async_16(
            v_tile + at,
            v_head + pg * p.v_strides.page + slot * p.v_strides.slot + lane_chunk * kChunkElems,
            valid, stream_once);
      }
    }
    if constexpr (Shape::kFp8) {  // entry i < kStepKeys: key i's K scale; then the V scales
#pragma unroll
      for (int i0 = 0; i0 < 2 * kStepKeys; i0 += 32) {
        const int i = i0 + lane, offset = i % kStepKeys, key = base + offset;
        const bool valid = key >= lo && key < hi;
        int pg = pages[0];
#pragma unroll
        for (int g = 1; g < kGroups; ++g) pg = offset >= 16 * g ? pages[g] : pg;
        if (!group_pages) pg = valid ? page_of(key) : 0;
        const float* src = i < kStepKeys
                               ? p.k_scale + pg * p.k_scale_page + c.kv_head * p.k_scale_head
                               : p.v_scale + pg * p.v_scale_page + c.kv_head * p.v_scale_head;
        cp_async_4(k_tile + 2 * kTileBytes + i * 4, src, valid);
      }
    }
  };

  // Page ids of the warp's steps (pages of >= 16 tokens: one per 16-key group), 32 per
  // register: lane l of `pages_now` holds group l % kGroups of step window + l / kGroups,
  // `pages_next` the 32 after, read a register's worth of steps before they are needed. (v3.0
  // read each id one step ahead: under full load that read waits behind the bulk copies for
  // microseconds, and every step waited for it, bf16 and e4m3 alike.)
  constexpr int kWindowSteps = 32 / kGroups;
  const int first = lo / kStepKeys * kStepKeys + warp * kStepKeys;
  auto read_pages = [&](int step0) {
    const int base = first + (step0 + lane / kGroups) * kStride + 16 * (lane % kGroups);
    return group_pages && base < hi ? page_of(base) : 0;
  };
  int window = 0, pages_now = read_pages(0), pages_next = read_pages(kWindowSteps);
  auto pages_of_step = [&](int step, int(&pages)[kGroups]) {  // increasing steps, whole warp
    if (step >= window + kWindowSteps) {
      window += kWindowSteps;
      pages_now = pages_next;
      pages_next = read_pages(window + kWindowSteps);
    }
#pragma unroll
    for (int g = 0; g < kGroups; ++g)
      pages[g] = __shfl_sync(0xffffffffu, pages_now, (step - window) * kGroups + g);
  };

  // Prologue: kStages - 1 steps issued.
#pragma unroll
  for (int k = 0; k < kStages - 1; ++k) {
    const int base = first + k * kStride;
    int pages[kGroups];
    pages_of_step(k, pages);
    if (base < hi) issue(base, pages, k);
    ptx::cp_async_commit();  // empty groups past the end keep the wait count uniform
  }
  // The queries load while the first steps are in flight (one memory latency, not two).
  mma_load_queries(p, c, s);
  int ahead_step = kStages - 1;  // the next step to issue
  int stage = 0;
  for (int base = first; base < hi; base += kStride) {
    // ldmatrix reads other lanes' copies: the whole warp must be done with the stage that is
    // refilled now (computed last iteration), and see this stage's copies after the wait.
    __syncwarp();
    const int ahead = first + ahead_step * kStride;
    int ahead_pages[kGroups];
    pages_of_step(ahead_step++, ahead_pages);
    if (ahead < hi) issue(ahead, ahead_pages, (stage + kStages - 1) % kStages);
    ptx::cp_async_commit();
    ptx::cp_async_wait<kStages - 1>();
    __syncwarp();

    const std::uint32_t k_tile = ring_addr + stage * kStageBytes, v_tile = k_tile + kTileBytes;
    [[maybe_unused]] const float* scales =
        reinterpret_cast<const float*>(ring + stage * kStageBytes + 2 * kTileBytes);

    // S = Q K^T, n tiles of 8 keys (2 per group); hi and lo in separate accumulators (two
    // chains of kSlices dependent mma instead of one of 2 kSlices). The lo products are a
    // separate copy of the loop, not a branch per mma, so that the compiler schedules either
    // freely.
    constexpr int kTiles = 2 * kGroups;
    float s_hi[kTiles][4] = {}, s_lo[kTiles][4] = {};
    auto scores = [&](auto with_lo) {
#pragma unroll
      for (int sl = 0; sl < Shape::kSlices; sl += kSliceStep) {
#pragma unroll
        for (int g = 0; g < kGroups; ++g) {
          std::uint32_t b[2][2][2];
          k_fragments<Shape>(k_tile + g * kGroupBytes, sl, lane, b);
#pragma unroll
          for (int h = 0; h < kSliceStep; ++h) {
            const std::uint32_t a_hi[4] = {s.q_hi[sl + h][0], 0u, s.q_hi[sl + h][1], 0u};
#pragma unroll
            for (int n = 0; n < 2; ++n) {
              ptx::mma_m16n8k16<Elem>(s_hi[2 * g + n], a_hi, b[n][h][0], b[n][h][1]);
              if constexpr (decltype(with_lo)::value) {
                const std::uint32_t a_lo[4] = {s.q_lo[sl + h][0], 0u, s.q_lo[sl + h][1], 0u};
                ptx::mma_m16n8k16<Elem>(s_lo[2 * g + n], a_lo, b[n][h][0], b[n][h][1]);
              }
            }
          }
        }
      }
    };
    if (s.q_exact) {
      scores(std::false_type{});
    } else {
      scores(std::true_type{});
    }

    // Scores of row g: x[2n + j] is key base + 8n + 2t + j (n over the step's 8-key tiles).
    // Inside the span, with no per-key mask and no score modifier (a decode step's common
    // case), a score is one multiply.
    constexpr int kScores = 2 * kTiles;
    float scale_log2 = p.scale_log2;
    if constexpr (std::is_same_v<Elem, __half>) scale_log2 *= s.q_ref;
    float x[kScores];
    float block_max = kNegInf;
    if (plain_scores && !c.key_mask && base >= lo && base + kStepKeys <= hi) {
#pragma unroll
      for (int k = 0; k < kScores; ++k) {
        float dot = s_hi[k / 2][k % 2] + s_lo[k / 2][k % 2];
        if constexpr (Shape::kFp8) dot *= scales[8 * (k / 2) + 2 * t + k % 2];
        x[k] = dot * scale_log2;
        block_max = fmaxf(block_max, x[k]);
      }
    } else {
#pragma unroll
      for (int k = 0; k < kScores; ++k) {
        const int offset = 8 * (k / 2) + 2 * t + k % 2, key = base + offset;
        float dot = s_hi[k / 2][k % 2] + s_lo[k / 2][k % 2];
        if constexpr (Shape::kFp8) dot *= scales[offset];  // e4m3 dequantisation, once per score
        const bool seen = key >= lo && key < hi &&
                          (!c.key_mask || core::key_visible(p.mask, s.diag, key, c.seq_len));
        const float v = plain_scores ? dot * scale_log2
                                     : modified_score_log2(p, dot * s.q_ref, s.slope, s.diag, key);
        x[k] = seen ? v : kNegInf;
        block_max = fmaxf(block_max, x[k]);
      }
    }
    block_max = ptx::quad_max(block_max);
    const float alpha = s.softmax.absorb_max(block_max);
    // e4m3: a V scale of this step above the warp's reference (rarely after the first step: a
    // page of larger values) raises it to the power of two above the step's largest scale.
    // Every quad holds all of the step's keys, so a quad's max is the warp's. Masked keys'
    // scales were zero-filled.
    float v_factor = 1.0f;  // O's extra factor when the reference rises: old / new
    [[maybe_unused]] float v_scales[kScores];
    if constexpr (Shape::kFp8) {
      float v_scale_max = 0.0f;
#pragma unroll
      for (int k = 0; k < kScores; ++k) {
        v_scales[k] = scales[kStepKeys + 8 * (k / 2) + 2 * t + k % 2];
        v_scale_max = fmaxf(v_scale_max, v_scales[k]);
      }
      if (__any_sync(0xffffffffu, v_scale_max > s.v_ref)) {
        float log2_ref;
        const float ref = power_of_two_above(ptx::quad_max(v_scale_max), log2_ref);
        v_factor = s.v_ref / ref;
        s.v_ref = ref;
        s.v_ref_log2 = log2_ref;
      }
    }
    // While the row has seen nothing its max is -inf: subtract 0 (exp2(-inf - -inf) is NaN).
    // e4m3 subtracts log2(v_ref) too: p / v_ref costs nothing here, and l takes v_ref back once
    // per step.
    float m = s.softmax.m == kNegInf ? 0.0f : s.softmax.m;
    if constexpr (Shape::kFp8) m += s.v_ref_log2;
    float prob[kScores], sum = 0.0f;
#pragma unroll
    for (int k = 0; k < kScores; ++k) {
      prob[k] = ptx::exp2_approx(x[k] - m);
      sum += prob[k];
    }
    if constexpr (Shape::kFp8) sum *= s.v_ref;
    s.softmax.l = s.softmax.l * alpha + sum;
    // O^T columns are rows 2t and 2t + 1, whose alphas live in quads 2t and 2t + 1. Once the
    // running maxima settle, alpha is 1 for the whole warp: skip the rescale then.
    if (__any_sync(0xffffffffu, alpha != 1.0f) || v_factor != 1.0f) {
      const float a0 = __shfl_sync(0xffffffffu, alpha, 8 * t) * v_factor;
      const float a1 = __shfl_sync(0xffffffffu, alpha, 8 * t + 4) * v_factor;
#pragma unroll
      for (int sl = 0; sl < Shape::kSlices; ++sl) {
        s.o[sl][0] *= a0;
        s.o[sl][1] *= a1;
        s.o[sl][2] *= a0;
        s.o[sl][3] *= a1;
      }
    }

    // P^T as B fragments, per group: (keys 2t, 2t + 1) and (2t + 8, 2t + 9) of row g, e4m3 V
    // scales folded in (one multiply per probability, never per element): p / v_ref * scale
    // <= 1.
    if constexpr (Shape::kFp8) {
#pragma unroll
      for (int k = 0; k < kScores; ++k) prob[k] *= v_scales[k];
    }
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      std::uint32_t p_hi[2], p_lo[2];
      split_pack<Elem>(prob[4 * g], prob[4 * g + 1], p_hi[0], p_lo[0]);
      split_pack<Elem>(prob[4 * g + 2], prob[4 * g + 3], p_hi[1], p_lo[1]);
#pragma unroll
      for (int sl = 0; sl < Shape::kSlices; sl += kSliceStep) {
        std::uint32_t a[2][4];
        v_fragments<Shape>(v_tile + g * kGroupBytes, sl, lane, a);
#pragma unroll
        for (int h = 0; h < kSliceStep; ++h) {
          ptx::mma_m16n8k16<Elem>(s.o[sl + h], a[h], p_hi[0], p_hi[1]);
          ptx::mma_m16n8k16<Elem>(s.o[sl + h], a[h], p_lo[0], p_lo[1]);
        }
      }
    }
    stage = stage + 1 == kStages ? 0 : stage + 1;
  }
  ptx::cp_async_wait<0>();
}

}  // namespace flashkit::cuda::decode
