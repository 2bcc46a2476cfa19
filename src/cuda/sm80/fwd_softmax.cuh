// The per-thread state of the sm80 forward and what happens to a block of scores between the two
// GEMMs: scale to base 2 (and softcap / ALiBi / mask where asked), then the online softmax
// (core::SoftmaxState) that rescales O and turns scores into probabilities in place.
//
// A thread holds, for each of its warp's m16 tiles, rows g and g + 8 (g = lane / 4) of every n8
// accumulator tile (ptx/mma.cuh), columns 2t and 2t + 1 (t = lane % 4): so a row is spread over
// the 4 lanes of a quad and its max and sum are quad reductions.
#pragma once

#include <cstdint>
#include <limits>

#include "core/softmax_state.hpp"
#include "cuda/common/fwd_params.hpp"
#include "cuda/common/score.cuh"
#include "cuda/ptx/convert.cuh"
#include "cuda/ptx/warp_reduce.cuh"
#include "cuda/sm80/row_mask.hpp"

namespace flashkit::cuda::sm80 {

template <class T>
struct FwdAccum {
  float o[T::kMmaM][T::kD / 8][4];
  core::SoftmaxState<float> row[T::kMmaM][2];  // l is this thread's partial sum until the end
};

template <class T>
using ScoreBlock = float[T::kMmaM][T::kBlockN / 8][4];

// Row of accumulator element (mt, idx) within the CTA's tile, and its column within the block.
template <class T>
__device__ __forceinline__ int frag_row(int warp, int lane, int mt, int idx) {
  return warp * T::kRowsPerWarp + mt * 16 + (idx / 2) * 8 + lane / 4;
}
__device__ __forceinline__ int frag_col(int lane, int nt, int idx) {
  return nt * 8 + (lane % 4) * 2 + idx % 2;
}

// Where a block of scores sits and which rules apply to it.
struct ScoreContext {
  std::int64_t row0;   // sequence index of the tile's row 0
  std::int64_t col0;   // sequence index of the block's key 0
  std::int64_t shift;  // causal diagonal shift
  std::int64_t len_k;
  float slope;  // ALiBi slope of this (sequence, head)
  bool mods;    // softcap or ALiBi on
};

// Raw q.k -> base-2 scores, returning the factor the softmax still has to apply (softmax_update).
// Fast path (no softcap or ALiBi, scale > 0): the scores stay raw and the factor is
// scale * log2(e), which softmax_update folds into its exponent's FFMA (FA2's order: one FFMA per
// score instead of a FMUL here and a FADD there; the row max of the raw scores times a positive
// factor is the max of the scaled ones, bit for bit). Otherwise the scores are scaled here (the
// oracle's softcap and ALiBi element by element when asked; uniform across the CTA) and the
// factor is 1.
template <class T>
__device__ __forceinline__ float scores_to_base2(ScoreBlock<T>& s, const FwdParams& p,
                                                 const ScoreContext& c, int warp, int lane) {
  if (!c.mods) {
    if (p.scale_log2 > 0.0f) return p.scale_log2;
#pragma unroll
    for (int mt = 0; mt < T::kMmaM; ++mt)
#pragma unroll
      for (int nt = 0; nt < T::kBlockN / 8; ++nt)
#pragma unroll
        for (int idx = 0; idx < 4; ++idx) s[mt][nt][idx] *= p.scale_log2;
    return 1.0f;
  }
  const float log2e = float(core::kLog2e);
#pragma unroll
  for (int mt = 0; mt < T::kMmaM; ++mt)
#pragma unroll
    for (int nt = 0; nt < T::kBlockN / 8; ++nt)
#pragma unroll
      for (int idx = 0; idx < 4; ++idx) {
        const std::int64_t diag = c.row0 + frag_row<T>(warp, lane, mt, idx) + c.shift;
        const std::int64_t j = c.col0 + frag_col(lane, nt, idx);
        s[mt][nt][idx] = score_of(p, s[mt][nt][idx], c.slope, diag, j) * log2e;
      }
  return 1.0f;
}

// -inf for the keys a row may not see, on blocks that cross a mask edge or the end of the keys.
// With T::kMaskRowForms each row's visible columns are settled once (row_columns) and moved to the
// thread's column base, so that each element is compared against constants: for causal rows one
// ISETP and an FSEL an element, where a column per element and three compares against the band
// (the other form, core::key_visible's test as it reads) take five instructions.
template <class T>
__device__ __forceinline__ void apply_mask(ScoreBlock<T>& s, const FwdParams& p,
                                           const ScoreContext& c, int warp, int lane) {
  const int prefix = int(p.mask.prefix_len < c.len_k ? p.mask.prefix_len : c.len_k);
  const int base = frag_col(lane, 0, 0);
  constexpr float kHidden = -std::numeric_limits<float>::infinity();
#pragma unroll
  for (int mt = 0; mt < T::kMmaM; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const core::KeyBand band =
          core::key_band(p.mask, c.row0 + frag_row<T>(warp, lane, mt, 2 * half) + c.shift, c.len_k);
      // Block-relative bounds; the band is within [0, len_k) so the ints cannot overflow.
      const int lo = int(band.lo - c.col0), hi = int(band.hi - c.col0);
      const int pre = prefix - int(c.col0);
      if constexpr (!T::kMaskRowForms) {
#pragma unroll
        for (int nt = 0; nt < T::kBlockN / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int j = frag_col(lane, nt, e);
            if (!(j < pre || (j >= lo && j <= hi))) s[mt][nt][2 * half + e] = kHidden;
          }
        continue;
      }
      RowColumns r = row_columns(lo, hi, pre);
      r.lo -= base;
      r.hi -= base;
      r.pre -= base;
#pragma unroll
      for (int nt = 0; nt < T::kBlockN / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          if (!row_sees_upto(r, nt * 8 + e)) s[mt][nt][2 * half + e] = kHidden;
        }
      if (!r.from_start) {
#pragma unroll
        for (int nt = 0; nt < T::kBlockN / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            if (!row_sees_from(r, nt * 8 + e)) s[mt][nt][2 * half + e] = kHidden;
          }
      }
    }
}

// With T::kStaleMax: how far (base 2) a row's block max may rise above its running max m before
// m moves. Below that m stays, so probabilities are exp2(s - m) <= 2^8 = 256: exact in fp32 sums
// and in 16-bit P V operands (f16 reaches 65504; the relative rounding of a normal number does not
// depend on its size), and O and l keep the same reference point, so the result is unchanged up
// to rounding. What it buys: alpha stays exactly 1 on all but a row's first blocks, and rescale_o
// skips multiplying O (64 values a thread at d = 128, 128 at d = 256), where with m moving on every
// new maximum a 16-row warp would still see some row's max move on a block every few blocks of a
// long row.
// FlashAttention-4 rescales on the same idea: only when the max has risen by more than a threshold.
inline constexpr float kStaleMaxSlack = 8.0f;

// The max of v[0 .. kN), pairwise, level kStep folding elements kStep apart: log2(kN) dependent
// FMNMX where a running max takes kN - 1, with the same kN - 1 instructions. A row half of a
// 128-key block has 16 pair maxima: 4 dependent FMNMX instead of 16 (~4 cycles each) on the path
// from S to the exponentials (docs/kernels/sm90_fwd.md, v33).
template <int kStep = 1, int kN>
__device__ __forceinline__ float tree_max(float (&v)[kN]) {
  if constexpr (kStep < kN) {
#pragma unroll
    for (int i = 0; i + kStep < kN; i += 2 * kStep) v[i] = fmaxf(v[i], v[i + kStep]);
    return tree_max<2 * kStep>(v);
  } else {
    return v[0];
  }
}

// Online softmax over one block, without touching O: new row max (quad-reduced; with
// T::kStaleMax moved only when it rises more than kStaleMaxSlack), l rescaled, scores replaced by
// exp2(s * factor - m) (factor: what scores_to_base2 returned); alpha[mt][half] =
// exp2(m_old - m_new), exactly 1 when m did not move, is the factor O must still be multiplied by
// (rescale_o). Split so a kernel can rescale O
// only once the previous block's P V, still running on the tensor cores, has finished. A row that
// has seen only hidden keys keeps m = -inf; exp2 then runs against 0 instead, giving p = 0 rather
// than NaN.
template <class T>
__device__ __forceinline__ void softmax_update(ScoreBlock<T>& s, FwdAccum<T>& acc,
                                               float (&alpha)[T::kMmaM][2], float factor) {
#pragma unroll
  for (int mt = 0; mt < T::kMmaM; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float pair_max[T::kBlockN / 8];
#pragma unroll
      for (int nt = 0; nt < T::kBlockN / 8; ++nt) {
        pair_max[nt] = fmaxf(s[mt][nt][2 * half], s[mt][nt][2 * half + 1]);
      }
      core::SoftmaxState<float>& st = acc.row[mt][half];
      const float row_max = ptx::quad_max(tree_max(pair_max)) * factor;
      // -inf + slack is -inf: a row's first visible keys always set m.
      auto exp2_of = [](float x) { return ptx::exp2_approx(x); };
      if constexpr (T::kStaleMax) {
        alpha[mt][half] = row_max > st.m + kStaleMaxSlack ? st.absorb_max(row_max, exp2_of) : 1.0f;
      } else {
        alpha[mt][half] = st.absorb_max(row_max, exp2_of);
      }
      const float m_use = st.m == -std::numeric_limits<float>::infinity() ? 0.0f : st.m;
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < T::kBlockN / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s[mt][nt][2 * half + e];
          x = ptx::exp2_approx(fmaf(x, factor, -m_use));
          sum += x;
        }
      st.l = st.l * alpha[mt][half] + sum;
    }
}

// With T::kStaleMax, a warp whose rows all kept their max (every alpha 1, the common case) skips
// the multiply; the vote makes the branch warp-uniform.
template <class T>
__device__ __forceinline__ void rescale_o(FwdAccum<T>& acc, const float (&alpha)[T::kMmaM][2]) {
  if constexpr (T::kStaleMax) {
    bool unchanged = true;
#pragma unroll
    for (int mt = 0; mt < T::kMmaM; ++mt) {
      unchanged &= (alpha[mt][0] == 1.0f) & (alpha[mt][1] == 1.0f);
    }
    if (__all_sync(0xffffffffu, unchanged)) return;
  }
#pragma unroll
  for (int mt = 0; mt < T::kMmaM; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int dn = 0; dn < T::kD / 8; ++dn) {
        acc.o[mt][dn][2 * half] *= alpha[mt][half];
        acc.o[mt][dn][2 * half + 1] *= alpha[mt][half];
      }
}

// Both at once, for a kernel whose O is not in flight.
template <class T>
__device__ __forceinline__ void online_softmax(ScoreBlock<T>& s, FwdAccum<T>& acc, float factor) {
  float alpha[T::kMmaM][2];
  softmax_update<T>(s, acc, alpha, factor);
  rescale_o<T>(acc, alpha);
}

// Probabilities of k16 step kk as the A fragment of P V: the S accumulator layout of n-tiles
// 2kk and 2kk + 1 is exactly the A layout (ptx/mma.cuh), so no data moves between lanes.
template <class T>
__device__ __forceinline__ void probs_as_a(std::uint32_t (&a)[4], const ScoreBlock<T>& s, int mt,
                                           int kk) {
  using Elem = typename T::Elem;
  a[0] = ptx::pack2<Elem>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
  a[1] = ptx::pack2<Elem>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
  a[2] = ptx::pack2<Elem>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
  a[3] = ptx::pack2<Elem>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
}

}  // namespace flashkit::cuda::sm80
