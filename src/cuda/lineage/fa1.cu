// FlashAttention-1 loop order (Dao et al. 2022, Algorithm 1) on CUDA cores in fp32: for each KV
// block j (outer), for each Q block i (inner): S = Q_i K_j^T, then the softmax state (m, l) and
// the normalised O_i are read from global memory, updated and written back. The O round trip per
// KV block is what FA2's loop swap (Q outer, O in registers) removes.
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/cost_model.hpp"
#include "core/softmax_state.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/dtype.cuh"
#include "cuda/common/score.cuh"
#include "cuda/common/stream_buffer.hpp"
#include "cuda/lineage/lineage.hpp"
#include "cuda/ptx/warp_reduce.cuh"

namespace flashkit::cuda {

namespace {

constexpr int kBr = 16;                  // query rows per block
constexpr int kBc = core::kFa1KeyBlock;  // keys per block (the cost model counts them)
constexpr int kThreads = kBr * kBc;
constexpr int kWarps = kThreads / 32;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The per-row state of FA1 in global memory: normalised O (fp32) and (m, l) in base 2.
struct Fa1Workspace {
  float* o;  // [batch * heads, seqlen_q, head_dim_v]
  float* m;  // [batch * heads, seqlen_q]
  float* l;
};

__global__ void fa1_init(Fa1Workspace ws, std::int64_t rows, int dim_v) {
  const std::int64_t r = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  ws.m[r] = kNegInf;
  ws.l[r] = 0.0f;
  for (int e = 0; e < dim_v; ++e) ws.o[r * dim_v + e] = 0.0f;
}

// Dynamic shared memory: K_j [kBc][d], V_j [kBc][dv], Q_i [kBr][d], P [kBr][kBc + 1], and two
// per-row coefficients.
__global__ void __launch_bounds__(kThreads) fa1_kernel(FwdParams p, Fa1Workspace ws) {
  extern __shared__ float smem[];
  const int d = p.head_dim, dv = p.head_dim_v;
  float* ks = smem;
  float* vs = ks + kBc * d;
  float* qs = vs + kBc * dv;
  float* ps = qs + kBr * d;
  float* coef_old = ps + kBr * (kBc + 1);
  float* coef_new = coef_old + kBr;

  const int bh = blockIdx.x, b = bh / p.heads_q, h = bh % p.heads_q, hk = h / p.group();
  const core::SeqSpan sp = sequence_span(p, b);
  const std::int64_t shift = core::diagonal_shift(p.mask, sp.len_q, sp.len_k);
  const float slope = alibi_slope(p, b, h), log2e = float(core::kLog2e);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const std::int64_t ws_row0 = std::int64_t(bh) * p.seqlen_q;

  for (int j0 = 0; j0 < sp.len_k; j0 += kBc) {
    for (int x = tid; x < kBc * d; x += kThreads) {
      const int j = j0 + x / d;
      ks[x] = j < sp.len_k
                  ? load_as_float(p.k, p.in_dtype,
                                  core::element_offset(p.k_layout, b, sp.k_start, j, hk) + x % d)
                  : 0.0f;
    }
    for (int x = tid; x < kBc * dv; x += kThreads) {
      const int j = j0 + x / dv;
      vs[x] = j < sp.len_k
                  ? load_as_float(p.v, p.in_dtype,
                                  core::element_offset(p.v_layout, b, sp.k_start, j, hk) + x % dv)
                  : 0.0f;
    }
    for (int i0 = 0; i0 < sp.len_q; i0 += kBr) {
      for (int x = tid; x < kBr * d; x += kThreads) {
        const int i = i0 + x / d;
        qs[x] = i < sp.len_q
                    ? load_as_float(p.q, p.in_dtype,
                                    core::element_offset(p.q_layout, b, sp.q_start, i, h) + x % d)
                    : 0.0f;
      }
      __syncthreads();
      {  // S: one score per thread, already in base 2; -inf where hidden
        const int r = tid / kBc, c = tid % kBc, i = i0 + r, j = j0 + c;
        float dot = 0.0f;
        for (int e = 0; e < d; ++e) dot += qs[r * d + e] * ks[c * d + e];
        const std::int64_t diag = i + shift;
        ps[r * (kBc + 1) + c] = key_is_visible(p.mask, diag, j, sp.len_k)
                                    ? score_of(p, dot, slope, diag, j) * log2e
                                    : kNegInf;
      }
      __syncthreads();
      // Row statistics: warp w owns rows w, w + kWarps; lanes 0..kBc-1 hold the row's scores.
      for (int r = warp; r < kBr; r += kWarps) {
        const int i = i0 + r;
        const float s = lane < kBc ? ps[r * (kBc + 1) + lane] : kNegInf;
        core::SoftmaxState<float> state;
        if (i < sp.len_q) {
          state.m = ws.m[ws_row0 + i];
          state.l = ws.l[ws_row0 + i];
        }
        const float l_old = state.l;
        const float alpha = state.absorb_max(ptx::warp_max(s));
        const float m_use = state.m == kNegInf ? 0.0f : state.m;
        const float prob = lane < kBc ? exp2f(s - m_use) : 0.0f;
        if (lane < kBc) ps[r * (kBc + 1) + lane] = prob;
        state.l = l_old * alpha + ptx::warp_sum(prob);
        if (lane == 0) {
          // O_new = (l_old alpha O_old + P V) / l_new: O stays normalised in memory.
          coef_old[r] = state.l > 0.0f ? l_old * alpha / state.l : 0.0f;
          coef_new[r] = state.l > 0.0f ? 1.0f / state.l : 0.0f;
          if (i < sp.len_q) {
            ws.m[ws_row0 + i] = state.m;
            ws.l[ws_row0 + i] = state.l;
          }
        }
      }
      __syncthreads();
      for (int x = tid; x < kBr * dv; x += kThreads) {
        const int r = x / dv, e = x % dv, i = i0 + r;
        if (i >= sp.len_q) continue;
        float acc = 0.0f;
        for (int c = 0; c < kBc; ++c) acc += ps[r * (kBc + 1) + c] * vs[c * dv + e];
        float& o = ws.o[(ws_row0 + i) * dv + e];
        o = coef_old[r] * o + coef_new[r] * acc;
      }
      __syncthreads();
    }
  }
}

// out = O (already normalised), lse from (m, l).
__global__ void fa1_finish(FwdParams p, Fa1Workspace ws) {
  const int bh = blockIdx.y, b = bh / p.heads_q, h = bh % p.heads_q;
  const int i = blockIdx.x;
  const core::SeqSpan sp = sequence_span(p, b);
  if (i >= sp.len_q) return;
  const std::int64_t r = std::int64_t(bh) * p.seqlen_q + i;
  const std::int64_t out0 = core::element_offset(p.out_layout, b, sp.q_start, i, h);
  for (int e = threadIdx.x; e < p.head_dim_v; e += blockDim.x) {
    store_from_float(p.out, p.out_dtype, out0 + e, ws.o[r * p.head_dim_v + e]);
  }
  if (threadIdx.x == 0 && p.lse != nullptr) {
    core::SoftmaxState<float> state;
    state.m = ws.m[r];
    state.l = ws.l[r];
    p.lse[core::element_offset(p.lse_layout, b, sp.q_start, i, h)] = state.lse();
  }
}

}  // namespace

void fa1_forward(const FwdParams& p, cudaStream_t stream) {
  const std::int64_t rows = std::int64_t(p.batch) * p.heads_q * p.seqlen_q;
  if (rows == 0) return;
  StreamBuffer buf(std::size_t(rows) * std::size_t(p.head_dim_v + 2) * sizeof(float), stream);
  Fa1Workspace ws{buf.as<float>(), buf.as<float>() + rows * p.head_dim_v,
                  buf.as<float>() + rows * (p.head_dim_v + 1)};
  fa1_init<<<unsigned((rows + 255) / 256), 256, 0, stream>>>(ws, rows, p.head_dim_v);
  check_launch("fa1_init");
  const std::size_t smem =
      sizeof(float) * std::size_t(kBc * p.head_dim + kBc * p.head_dim_v + kBr * p.head_dim +
                                  kBr * (kBc + 1) + 2 * kBr);
  check_cuda(
      cudaFuncSetAttribute(fa1_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
      "fa1_kernel shared memory");
  fa1_kernel<<<unsigned(p.batch * p.heads_q), kThreads, smem, stream>>>(p, ws);
  check_launch("fa1_kernel");
  fa1_finish<<<dim3(unsigned(p.seqlen_q), unsigned(p.batch * p.heads_q)), 128, 0, stream>>>(p, ws);
  check_launch("fa1_finish");
}

}  // namespace flashkit::cuda
