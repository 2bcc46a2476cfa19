// The fp32-input forward on CUDA cores, in FlashAttention-2's loop order: a CTA owns 64 query rows
// of one head and keeps their Q (transposed), softmax state (m, l) and O in registers and shared
// memory while the KV blocks its rows can see stream past (sm80::kv_block_range: causal and
// window block skipping), then writes O / l and the lse once. FA1's loop (lineage/fa1.cu), which
// this replaces for f32 inputs, runs one CTA per (sequence, head) and sends O through global
// memory on every block: on one head that is one CTA for the whole GPU.
//
// 256 threads as 16 x 16: thread (ty, tx) owns query rows 4 ty .. 4 ty + 3, keys tx and tx + 16
// of each 32-key block (8 scores), and O columns tx + 16 c. A row's 32 scores sit in one
// half-warp, so its max and sum are 4 shuffles. Per head-dim element the score loop reads one
// float4 of Q^T and two floats of K^T for 8 FMAs; per key the P V loop one float4 of P^T and
// kD / 16 floats of V for kD / 4 FMAs. Arithmetic is fp32 throughout (exp2f, not ex2.approx), as
// the f32 rule of the tests demands.
//
// Key splits: when (query tiles x heads x sequences) would leave SMs idle (one head at N = 1024
// is 16 CTAs for 132 SMs), each tile's visited blocks are cut into `splits` runs, one CTA each,
// which write a partial (o, lse) in fp32 to a workspace; merge_kernel then combines a row's
// partials with warp_merge, the merge of merge_states and the paged decode.
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

#include "core/key_splits.hpp"
#include "core/softmax_state.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/dtype.cuh"
#include "cuda/common/score.cuh"
#include "cuda/common/stream_buffer.hpp"
#include "cuda/common/warp_merge.cuh"
#include "cuda/fwd_fp32.hpp"
#include "cuda/sm80/kv_block_range.hpp"

namespace flashkit::cuda {

namespace {

constexpr int kRows = 64;           // query rows per CTA
constexpr int kKeys = 32;           // keys per block
constexpr int kThreads = 256;       // 16 x 16, see above
constexpr int kQPitch = kRows + 4;  // Q^T and P^T rows: float4-aligned
constexpr int kKPitch = kKeys + 1;  // K^T rows: the transposing stores hit 32 different banks
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Key splits (core::key_splits, for about 2 CTAs per SM; the d <= 128 kernels fit 2-3 per SM by
// registers and shared memory): up to 16 (warp_merge's 16-state round), each at least 4 blocks
// (128 keys) long.
constexpr int kMaxSplits = 16;
constexpr int kMinKeysPerSplit = 4 * kKeys;

// Where split CTAs put their partial states: row ((s * batch + b) * seqlen_q + i) * heads_q + h
// of split s holds o (kD floats, normalised; columns past d_v are 0) and lse (natural log, -inf
// when the split saw no key).
struct SplitStates {
  int splits;  // 1: no workspace, the kernel writes out and lse itself
  float* o;
  float* lse;
};

// Shared memory in floats, for head dims up to kD (Q^T [kD][kQPitch], K^T [kD][kKPitch],
// V [kKeys][kD], P^T [kKeys][kQPitch]): 145 KB at kD = 256, 73 KB at 128.
template <int kD>
struct Fp32Smem {
  static constexpr int kQ = 0;
  static constexpr int kK = kQ + kD * kQPitch;
  static constexpr int kV = kK + kD * kKPitch;
  static constexpr int kP = kV + kKeys * kD;
  static constexpr int kFloats = kP + kKeys * kQPitch;
  static constexpr int kBytes = kFloats * int(sizeof(float));
  static_assert(kQ % 4 == 0 && kP % 4 == 0 && kQPitch % 4 == 0, "float4 rows of Q^T and P^T");
};

// A row's max or sum over the 16 lanes of its half-warp.
__device__ __forceinline__ float half_warp_max(float x) {
#pragma unroll
  for (int m = 8; m >= 1; m /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, m));
  return x;
}
__device__ __forceinline__ float half_warp_sum(float x) {
#pragma unroll
  for (int m = 8; m >= 1; m /= 2) x += __shfl_xor_sync(0xffffffffu, x, m);
  return x;
}

template <int kD>
__global__ void __launch_bounds__(kThreads)
    fwd_fp32_kernel(const FwdParams p, const SplitStates split) {
  using L = Fp32Smem<kD>;
  constexpr int kCols = kD / 16;  // O columns per thread
  extern __shared__ __align__(16) float smem[];
  float* const qt = smem + L::kQ;
  float* const kt = smem + L::kK;
  float* const vs = smem + L::kV;
  float* const pt = smem + L::kP;

  const int b = blockIdx.z, h = blockIdx.y, hk = h / p.group();
  const core::SeqSpan sp = sequence_span(p, b);
  const int len_q = int(sp.len_q), len_k = int(sp.len_k);
  const int i0 = int(blockIdx.x) / split.splits * kRows, s_idx = int(blockIdx.x) % split.splits;
  if (i0 >= len_q) return;
  const int tid = int(threadIdx.x), tx = tid % 16, ty = tid / 16;
  const int d = p.head_dim, dv = p.head_dim_v;
  const std::int64_t shift = core::diagonal_shift(p.mask, len_q, len_k);
  const float slope = alibi_slope(p, b, h), log2e = float(core::kLog2e);

  // Q^T, zero past the sequence's rows and the head dim (so the dot over kD is the dot over d).
  for (int x = tid; x < kRows * kD; x += kThreads) {
    const int r = x / kD, e = x % kD, i = i0 + r;
    qt[e * kQPitch + r] =
        i < len_q && e < d
            ? load_as_float(p.q, p.in_dtype,
                            core::element_offset(p.q_layout, b, sp.q_start, i, h) + e)
            : 0.0f;
  }

  core::SoftmaxState<float> st[4];  // rows 4 ty + r; l is this lane's share of the row sum
  float o[4][kCols];
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int c = 0; c < kCols; ++c) o[r][c] = 0.0f;

  const int last_row = (i0 + kRows < len_q ? i0 + kRows : len_q) - 1;
  const sm80::KvBlockRange blocks = sm80::kv_block_range(p.mask, i0, last_row, len_q, len_k, kKeys);
  const bool mods = p.has_score_mods();
  // This split's run of the walk: blocks [s_idx * per, (s_idx + 1) * per) of blocks.count().
  const int per = (blocks.count() + split.splits - 1) / split.splits;
  int n = blocks.first();
  for (int skip = s_idx * per; n >= 0 && skip > 0; --skip) n = blocks.next(n);
  for (int taken = 0; n >= 0 && taken < per; n = blocks.next(n), ++taken) {
    const int j0 = n * kKeys;
    __syncthreads();  // every thread is past the previous block's K^T, V and P^T
    for (int x = tid; x < kKeys * kD; x += kThreads) {
      const int c = x / kD, e = x % kD, j = j0 + c;
      const bool key = j < len_k;
      kt[e * kKPitch + c] =
          key && e < d ? load_as_float(p.k, p.in_dtype,
                                       core::element_offset(p.k_layout, b, sp.k_start, j, hk) + e)
                       : 0.0f;
      vs[c * kD + e] =
          key && e < dv ? load_as_float(p.v, p.in_dtype,
                                        core::element_offset(p.v_layout, b, sp.k_start, j, hk) + e)
                        : 0.0f;
    }
    __syncthreads();  // K^T, V (and, on the first block, Q^T) visible

    float s[4][2] = {};
#pragma unroll 8
    for (int e = 0; e < kD; ++e) {
      const float4 q4 = *reinterpret_cast<const float4*>(qt + e * kQPitch + 4 * ty);
      const float k0 = kt[e * kKPitch + tx], k1 = kt[e * kKPitch + tx + 16];
      s[0][0] = fmaf(q4.x, k0, s[0][0]);
      s[0][1] = fmaf(q4.x, k1, s[0][1]);
      s[1][0] = fmaf(q4.y, k0, s[1][0]);
      s[1][1] = fmaf(q4.y, k1, s[1][1]);
      s[2][0] = fmaf(q4.z, k0, s[2][0]);
      s[2][1] = fmaf(q4.z, k1, s[2][1]);
      s[3][0] = fmaf(q4.w, k0, s[3][0]);
      s[3][1] = fmaf(q4.w, k1, s[3][1]);
    }

    // Scores in base 2; the element-wise mask and score rules only on blocks that need them.
    const bool masked = blocks.needs_mask(n);
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const std::int64_t diag = i0 + 4 * ty + r + shift;
      float x[2];
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const int j = j0 + tx + 16 * k;
        if (!masked && !mods) {
          x[k] = s[r][k] * p.scale_log2;
        } else {
          x[k] = (!masked || key_is_visible(p.mask, diag, j, len_k))
                     ? score_of(p, s[r][k], slope, diag, j) * log2e
                     : kNegInf;
        }
      }
      const float alpha = st[r].absorb_max(half_warp_max(fmaxf(x[0], x[1])));
      const float m = st[r].m == kNegInf ? 0.0f : st[r].m;  // a row that saw nothing: exp2 -> 0
      const float p0 = exp2f(x[0] - m), p1 = exp2f(x[1] - m);
      st[r].l = st[r].l * alpha + p0 + p1;
#pragma unroll
      for (int c = 0; c < kCols; ++c) o[r][c] *= alpha;
      pt[tx * kQPitch + 4 * ty + r] = p0;
      pt[(tx + 16) * kQPitch + 4 * ty + r] = p1;
    }
    __syncthreads();  // P^T visible

#pragma unroll 4
    for (int c = 0; c < kKeys; ++c) {
      const float4 p4 = *reinterpret_cast<const float4*>(pt + c * kQPitch + 4 * ty);
#pragma unroll
      for (int col = 0; col < kCols; ++col) {
        const float v = vs[c * kD + tx + 16 * col];
        o[0][col] = fmaf(p4.x, v, o[0][col]);
        o[1][col] = fmaf(p4.y, v, o[1][col]);
        o[2][col] = fmaf(p4.z, v, o[2][col]);
        o[3][col] = fmaf(p4.w, v, o[3][col]);
      }
    }
  }

#pragma unroll
  for (int r = 0; r < 4; ++r) {
    st[r].l = half_warp_sum(st[r].l);
    const int i = i0 + 4 * ty + r;
    if (i >= len_q) continue;
    const float inv_l = st[r].l > 0.0f ? 1.0f / st[r].l : 0.0f;  // no visible key: O = 0
    if (split.splits > 1) {
      const std::int64_t row =
          ((std::int64_t(s_idx) * p.batch + b) * p.seqlen_q + i) * p.heads_q + h;
#pragma unroll
      for (int c = 0; c < kCols; ++c) split.o[row * kD + tx + 16 * c] = o[r][c] * inv_l;
      if (tx == 0) split.lse[row] = st[r].lse();
      continue;
    }
    const std::int64_t out0 = core::element_offset(p.out_layout, b, sp.q_start, i, h);
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const int e = tx + 16 * c;
      if (e < dv) store_from_float(p.out, p.out_dtype, out0 + e, o[r][c] * inv_l);
    }
    if (tx == 0 && p.lse != nullptr) {
      p.lse[core::element_offset(p.lse_layout, b, sp.q_start, i, h)] = st[r].lse();
    }
  }
}

// One warp per (sequence, query row, head, 128 elements of d_v): the row's `splits` partial
// states into out (and lse), lane l owning elements 4 l .. 4 l + 3 of its chunk.
template <int kD, int kRound>
__global__ void __launch_bounds__(128) merge_kernel(const FwdParams p, const SplitStates split) {
  constexpr int kChunks = (kD + 127) / 128;
  const std::int64_t warp = (std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const std::int64_t row = warp / kChunks;  // (b * seqlen_q + i) * heads_q + h
  if (row >= std::int64_t(p.batch) * p.seqlen_q * p.heads_q) return;  // warp-uniform
  const int h = int(row % p.heads_q), i = int(row / p.heads_q % p.seqlen_q);
  const int b = int(row / p.heads_q / p.seqlen_q);
  const core::SeqSpan sp = sequence_span(p, b);
  if (i >= sp.len_q) return;
  const int e = int(warp % kChunks) * 128 + int(threadIdx.x % 32) * 4;
  const std::int64_t states = std::int64_t(p.batch) * p.seqlen_q * p.heads_q;
  float o[4], lse;
  warp_merge<kRound, 4>(split.splits, split.lse + row, states, split.o + row * kD + e, states * kD,
                        e < kD, o, lse);
  const std::int64_t out0 = core::element_offset(p.out_layout, b, sp.q_start, i, h);
#pragma unroll
  for (int v = 0; v < 4; ++v) {
    if (e + v < p.head_dim_v) store_from_float(p.out, p.out_dtype, out0 + e + v, o[v]);
  }
  if (e == 0 && p.lse != nullptr) {
    p.lse[core::element_offset(p.lse_layout, b, sp.q_start, i, h)] = lse;
  }
}

// The smallest compiled head-dim bucket that holds d and d_v; 0 when none does.
int fp32_bucket(int head_dim, int head_dim_v) {
  const int dim = head_dim > head_dim_v ? head_dim : head_dim_v;
  for (int bucket : {32, 64, 128, 256}) {
    if (dim <= bucket) return bucket;
  }
  return 0;
}

int fp32_smem_bytes(int bucket) {
  switch (bucket) {
    case 32:
      return Fp32Smem<32>::kBytes;
    case 64:
      return Fp32Smem<64>::kBytes;
    case 128:
      return Fp32Smem<128>::kBytes;
    default:
      return Fp32Smem<256>::kBytes;
  }
}

template <int kD>
void launch(const FwdParams& p, int sm_count, cudaStream_t stream) {
  const int smem = Fp32Smem<kD>::kBytes;
  check_cuda(
      cudaFuncSetAttribute(fwd_fp32_kernel<kD>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
      "fwd_fp32_kernel shared memory");
  const int tiles = (p.seqlen_q + kRows - 1) / kRows;
  const std::int64_t rows = std::int64_t(p.batch) * p.seqlen_q * p.heads_q;
  SplitStates split{int(core::key_splits(std::int64_t(tiles) * p.heads_q * p.batch, sm_count,
                                         p.seqlen_k, kMinKeysPerSplit, kMaxSplits)),
                    nullptr, nullptr};
  const StreamBuffer workspace(
      split.splits > 1 ? std::size_t(split.splits) * rows * (kD + 1) * sizeof(float) : 0, stream);
  if (split.splits > 1) {
    split.o = workspace.as<float>();
    split.lse = split.o + std::int64_t(split.splits) * rows * kD;
  }
  const dim3 grid(unsigned(tiles * split.splits), unsigned(p.heads_q), unsigned(p.batch));
  fwd_fp32_kernel<kD><<<grid, kThreads, smem, stream>>>(p, split);
  check_launch("fwd_fp32_kernel");
  if (split.splits == 1) return;
  constexpr int kChunks = (kD + 127) / 128;
  const auto blocks = unsigned((rows * kChunks + 3) / 4);  // 4 warps per block
  with_merge_round<kMaxSplits>(split.splits, [&](auto round) {
    merge_kernel<kD, decltype(round)::value><<<blocks, 128, 0, stream>>>(p, split);
  });
  check_launch("fwd_fp32 merge_kernel");
}

}  // namespace

bool fwd_fp32_runs(int head_dim, int head_dim_v, int smem_optin) {
  const int bucket = fp32_bucket(head_dim, head_dim_v);
  return bucket > 0 && fp32_smem_bytes(bucket) <= smem_optin;
}

void fwd_fp32(const FwdParams& p, int sm_count, cudaStream_t stream) {
  if (p.seqlen_q == 0 || p.batch == 0) return;
  switch (fp32_bucket(p.head_dim, p.head_dim_v)) {
    case 32:
      return launch<32>(p, sm_count, stream);
    case 64:
      return launch<64>(p, sm_count, stream);
    case 128:
      return launch<128>(p, sm_count, stream);
    default:
      return launch<256>(p, sm_count, stream);
  }
}

}  // namespace flashkit::cuda
