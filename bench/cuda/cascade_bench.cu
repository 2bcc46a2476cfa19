// Cascade (shared-prefix) decode against plain paged decode on one CUDA device: BENCH.md's decode
// settings (bf16, GQA 32 query / 8 KV heads, d 128, page size 16, one new token per request),
// `batch` requests sharing a `prefix`-token prompt, each with a `suffix`-token private tail (its
// new token last). Both read the same cache: the prefix's pages once in the pool, every request's
// block table listing them and then its own suffix pages (what a radix prefix cache holds).
//   flashkit-paged          paged_attention over each request's prefix + suffix (split plan)
//   flashkit-paged-private  the same with a private copy of the prefix per request (no prefix
//                           caching: every request's prefix read from its own pages)
//   flashkit-cascade        cascade_attention: the prefix once on tensor cores, suffixes on the
//                           decode kernels, merge_states
//   flashkit-cascade-2stream the same with the suffix level on a second stream (side_stream),
//                           concurrent with the shared level
//   flashkit-cascade-decode the same with the shared level on the decode kernels (Algo::fa1),
//                           the design the tensor-core path replaces
// and, for the first configuration, diagnostic rows: the shared level's key splits capped at 8
// and 4 (FLASHKIT_CASCADE_SPLITS), on one stream and on two; and those that split the cascade's
// time: the same call with an empty prefix (both levels' launches, the suffix level's keys), the
// suffix level alone, twice in one graph (a kernel boundary) and folding 8 or 1 prior states,
// the shared level alone with its prefix and with none.
// Each call is captured in a CUDA graph and timed with CUDA events after a warm-up, median of
// 30; the pool is rotated over copies when one is under 3x the L2. The cascade's output is
// checked against plain paged decode's (every element) and both against a double-precision host
// reference (request 0 and the last, KV head 0's query heads) before the time is kept.
//
// The second suite, paged_prefill, times paged_attention with q_len new tokens per sequence
// (causal, bottom-right; batches 1, 4 and 16 over 4096 cached tokens) on the decode kernels and
// on the tensor-core paged forward (cuda/paged_fwd.hpp), both called directly, and
// paged_attention itself (which routes calls between the two by thresholds taken from this
// suite: cuda/paged_fwd.cpp, paged_fwd_preferred).
//
//   flashkit_cascade_bench --out DIR [--commit SHA]   (writes DIR/cascade.json,
//                                                      DIR/paged_prefill.json)
//   flashkit_cascade_bench --out DIR --config B,P,S   (only cascade configs batch B, prefix P,
//                          [--config ...]              suffix S: for profiling one shape)
//   flashkit_cascade_bench ... --page N               (pages of N tokens, a power of two from 1
//                                                      to 256, instead of 16)
//   flashkit_cascade_bench ... --timeline             (also the first configuration's steps and
//                                                      levels kernel by kernel, from CUPTI:
//                                                      DIR/cascade_timeline.json)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_support.cuh"
#include "core/validate.hpp"
#include "cuda/decode/decode_backend.hpp"
#include "cuda/paged_fwd.hpp"
#include "flashkit/flashkit.hpp"
#include "kernel_timeline.hpp"

namespace {

using namespace flashkit::bench;

using flashkit::Device;
using flashkit::DType;
using flashkit::Tensor;

constexpr int kHeadsQ = 32, kHeadsKv = 8, kDim = 128;
// Tokens per cache page: BENCH.md's 16 unless --page says otherwise.
int page_size = 16;
constexpr int kGroup = kHeadsQ / kHeadsKv;
constexpr std::uint32_t kSeedK = 1, kSeedV = 2, kSeedQ = 3;
constexpr std::int64_t kTokenElems = std::int64_t(kHeadsKv) * kDim;  // per K (or V) token

double bf16_value(std::int64_t i, std::uint32_t seed) {
  return __bfloat162float(__float2bfloat16_rn(hashed_unit(i, seed)));
}

double bf16_bits(std::uint16_t b) {
  const std::uint32_t bits = std::uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// One graph per input set of `call`.
std::vector<cudaGraphExec_t> capture_graphs(const std::vector<std::function<void()>>& calls,
                                            cudaStream_t stream) {
  std::vector<cudaGraphExec_t> graphs;
  for (const auto& call : calls) {
    cudaGraph_t g = nullptr;
    cudaGraphExec_t exec = nullptr;
    check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "begin capture");
    call();
    check(cudaStreamEndCapture(stream, &g), "end capture");
    check(cudaGraphInstantiate(&exec, g, 0), "instantiate");
    cudaGraphDestroy(g);
    graphs.push_back(exec);
  }
  return graphs;
}

// The median time of replaying the graphs of `calls` in turn.
double graph_ms(const std::vector<std::function<void()>>& calls, cudaStream_t stream) {
  const std::vector<cudaGraphExec_t> graphs = capture_graphs(calls, stream);
  const double ms = median_ms(
      [&](int i) {
        check(cudaGraphLaunch(graphs[std::size_t(i) % graphs.size()], stream), "graph launch");
      },
      5, 30, stream);
  for (cudaGraphExec_t e : graphs) cudaGraphExecDestroy(e);
  return ms;
}

// ---------------------------------------------------------------------------------------------
// cascade suite

struct Config {
  int batch, prefix, suffix;
  int prefix_pages() const { return prefix / page_size; }
  int suffix_pages() const { return (suffix + page_size - 1) / page_size; }
  // Pages of one input set: the shared prefix, every suffix, every request's private prefix.
  std::int64_t set_pages() const {
    return prefix_pages() + std::int64_t(batch) * (suffix_pages() + prefix_pages());
  }
  double kv_bytes_per_token() const { return 2.0 * kTokenElems * 2; }
};

// --timeline: the first configuration's cascade steps and levels kernel by kernel as well
// (DIR/cascade_timeline.json).
bool timeline = false;
struct TimelineRow {
  std::string impl;
  Config c;
  Timeline t;
};
std::vector<TimelineRow> timelines;

struct CascadeRow {
  std::string impl;
  Config c;
  double ms, kv_bytes;
  double err_vs_paged, err_vs_reference;
};

// Host reference of request b, query heads 0..group-1 (KV head 0): softmax over its keys.
double reference_error(const Config& c, int b, const std::vector<std::int32_t>& table,
                       std::int64_t table_cols, const std::vector<std::uint16_t>& out) {
  const int n = c.prefix + c.suffix;
  const double scale = 1.0 / std::sqrt(double(kDim));
  std::vector<double> s(std::size_t(n), 0.0);
  double worst = 0;
  for (int h = 0; h < kGroup; ++h) {
    const std::int64_t q0 = (std::int64_t(b) * kHeadsQ + h) * kDim;
    double m = -1e300;
    for (int t = 0; t < n; ++t) {
      const std::int64_t page = table[std::size_t(b * table_cols + t / page_size)];
      const std::int64_t row = (page * page_size + t % page_size) * kTokenElems;  // KV head 0
      double dot = 0;
      for (int e = 0; e < kDim; ++e)
        dot += bf16_value(q0 + e, kSeedQ) * bf16_value(row + e, kSeedK);
      s[std::size_t(t)] = dot * scale;
      m = std::max(m, s[std::size_t(t)]);
    }
    double l = 0;
    for (double& x : s) l += (x = std::exp(x - m));
    for (int e = 0; e < kDim; ++e) {
      double o = 0;
      for (int t = 0; t < n; ++t) {
        const std::int64_t page = table[std::size_t(b * table_cols + t / page_size)];
        o += s[std::size_t(t)] *
             bf16_value((page * page_size + t % page_size) * kTokenElems + e, kSeedV);
      }
      worst = std::max(worst, std::abs(o / l - bf16_bits(out[std::size_t(q0 + e)])));
    }
  }
  return worst;
}

std::vector<CascadeRow> run_cascade_config(const Config& c, int sms, double l2_bytes, bool diagnose,
                                           cudaStream_t stream, cudaStream_t side_stream) {
  const Device dev = Device::cuda(0);
  const std::int64_t unique_bytes =
      std::int64_t(c.prefix + std::int64_t(c.batch) * c.suffix) * kTokenElems * 2 * 2;
  const int sets = int(std::clamp(std::ceil(3 * l2_bytes / double(unique_bytes)), 1.0, 4.0));
  const std::int64_t num_pages = sets * c.set_pages();
  const std::int64_t pool_elems = num_pages * page_size * kTokenElems;
  const std::int64_t page_bytes = std::int64_t(page_size) * kTokenElems * 2;
  Buffer k(std::size_t(pool_elems) * 2), v(std::size_t(pool_elems) * 2);
  fill_bf16<<<2048, 256, 0, stream>>>(k.as<__nv_bfloat16>(), pool_elems, kSeedK);
  fill_bf16<<<2048, 256, 0, stream>>>(v.as<__nv_bfloat16>(), pool_elems, kSeedV);
  const std::int64_t q_elems = std::int64_t(c.batch) * kHeadsQ * kDim;
  Buffer q(std::size_t(q_elems) * 2);
  fill_bf16<<<256, 256, 0, stream>>>(q.as<__nv_bfloat16>(), q_elems, kSeedQ);
  check(cudaGetLastError(), "fill");

  // Set s: pages [s * set_pages, ...): prefix, then each request's suffix pages, then each
  // request's private copy of the prefix (bytes copied from the shared pages).
  const int pp = c.prefix_pages(), sp = c.suffix_pages();
  const std::int64_t cols = pp + sp;
  std::vector<std::int32_t> paged((std::size_t(sets) * c.batch * cols)), priv(paged.size()),
      shared(std::size_t(sets) * std::max(pp, 1)), suffix(std::size_t(sets) * c.batch * sp);
  for (int s = 0; s < sets; ++s) {
    const std::int64_t base = s * c.set_pages();
    const std::int64_t suffix0 = base + pp, private0 = suffix0 + std::int64_t(c.batch) * sp;
    for (int i = 0; i < std::max(pp, 1); ++i)
      shared[std::size_t(s * std::max(pp, 1) + i)] = int(base + i);
    for (int b = 0; b < c.batch; ++b) {
      const std::size_t row = (std::size_t(s) * c.batch + b) * cols;
      for (int i = 0; i < pp; ++i) {
        paged[row + i] = int(base + i);
        priv[row + i] = int(private0 + std::int64_t(b) * pp + i);
      }
      for (int i = 0; i < sp; ++i) {
        const int page = int(suffix0 + std::int64_t(b) * sp + i);
        paged[row + pp + i] = priv[row + pp + i] = page;
        suffix[(std::size_t(s) * c.batch + b) * sp + i] = page;
      }
      for (Buffer* pool : {&k, &v}) {
        check(cudaMemcpyAsync(pool->as<char>() + (private0 + std::int64_t(b) * pp) * page_bytes,
                              pool->as<char>() + base * page_bytes, std::size_t(pp * page_bytes),
                              cudaMemcpyDeviceToDevice, stream),
              "private prefix copy");
      }
    }
  }
  auto upload = [&](const std::vector<std::int32_t>& h) {
    auto buf = std::make_unique<Buffer>(h.size() * 4);
    check(cudaMemcpy(buf->p, h.data(), h.size() * 4, cudaMemcpyHostToDevice), "upload");
    return buf;
  };
  const auto d_paged = upload(paged), d_priv = upload(priv), d_shared = upload(shared),
             d_suffix = upload(suffix);
  const auto d_lens = upload(std::vector<std::int32_t>(std::size_t(c.batch), c.prefix + c.suffix));
  const auto d_suffix_lens = upload(std::vector<std::int32_t>(std::size_t(c.batch), c.suffix));
  const auto d_prefix_len = upload(std::vector<std::int32_t>{c.prefix, 0});

  const flashkit::PagedSplitPlan plan =
      flashkit::plan_paged_split(c.batch, 1, kHeadsQ, kHeadsKv, kDim, c.prefix + c.suffix, sms);
  Buffer paged_ws(std::size_t(std::max<std::int64_t>(plan.workspace_elems, 1)) * 4);
  const std::int64_t cascade_elems = flashkit::cascade_workspace_elems(c.batch, 1, kHeadsQ, kDim);
  Buffer cascade_ws(std::size_t(cascade_elems) * 4);
  Buffer out_paged(std::size_t(q_elems) * 2), out_cascade(std::size_t(q_elems) * 2);

  const Tensor q_t(q.p, DType::bf16, {c.batch, 1, kHeadsQ, kDim}, dev);
  const Tensor k_t(k.p, DType::bf16, {num_pages, page_size, kHeadsKv, kDim}, dev);
  const Tensor v_t(v.p, DType::bf16, {num_pages, page_size, kHeadsKv, kDim}, dev);
  auto paged_call = [&](int s, const Buffer& tables, void* out) {
    flashkit::PagedAttentionArgs a;
    a.q = q_t;
    a.out = Tensor(out, DType::bf16, {c.batch, 1, kHeadsQ, kDim}, dev);
    a.kv.k_pages = k_t;
    a.kv.v_pages = v_t;
    a.kv.block_table = Tensor(tables.as<std::int32_t>() + std::int64_t(s) * c.batch * cols,
                              DType::i32, {c.batch, cols}, dev);
    a.kv.seq_lens = Tensor(d_lens->p, DType::i32, {c.batch}, dev);
    a.mask.causal = true;
    a.num_splits = 0;
    a.workspace =
        Tensor(paged_ws.p, DType::f32, {std::max<std::int64_t>(plan.workspace_elems, 1)}, dev);
    a.stream = stream;
    return [a] { flashkit::paged_attention(a); };
  };
  auto cascade_call = [&](int s, flashkit::Algo algo, bool empty_prefix = false,
                          cudaStream_t side = nullptr) {
    flashkit::CascadeAttentionArgs a;
    a.q = q_t;
    a.out = Tensor(out_cascade.p, DType::bf16, {c.batch, 1, kHeadsQ, kDim}, dev);
    a.shared.k_pages = a.suffix.k_pages = k_t;
    a.shared.v_pages = a.suffix.v_pages = v_t;
    const int spp = std::max(pp, 1);
    a.shared.block_table =
        Tensor(d_shared->as<std::int32_t>() + s * spp, DType::i32, {1, spp}, dev);
    a.shared.seq_lens =
        Tensor(d_prefix_len->as<std::int32_t>() + (empty_prefix ? 1 : 0), DType::i32, {1}, dev);
    a.suffix.block_table = Tensor(d_suffix->as<std::int32_t>() + std::int64_t(s) * c.batch * sp,
                                  DType::i32, {c.batch, sp}, dev);
    a.suffix.seq_lens = Tensor(d_suffix_lens->p, DType::i32, {c.batch}, dev);
    a.workspace = Tensor(cascade_ws.p, DType::f32, {cascade_elems}, dev);
    a.mask.causal = true;
    a.algo = algo;
    a.stream = stream;
    a.side_stream = side;
    return [a] { flashkit::cascade_attention(a); };
  };

  // Correctness on set 0 before any timing.
  check(cudaMemsetAsync(out_paged.p, 0xFF, std::size_t(q_elems) * 2, stream), "poison");
  check(cudaMemsetAsync(out_cascade.p, 0xFF, std::size_t(q_elems) * 2, stream), "poison");
  paged_call(0, *d_paged, out_paged.p)();
  cascade_call(0, flashkit::Algo::automatic)();
  check(cudaStreamSynchronize(stream), "first calls");
  std::vector<std::uint16_t> h_paged(static_cast<std::size_t>(q_elems)), h_cascade(h_paged.size());
  check(cudaMemcpy(h_paged.data(), out_paged.p, h_paged.size() * 2, cudaMemcpyDeviceToHost), "out");
  check(cudaMemcpy(h_cascade.data(), out_cascade.p, h_cascade.size() * 2, cudaMemcpyDeviceToHost),
        "out");
  double diff = 0;
  for (std::size_t i = 0; i < h_paged.size(); ++i) {
    const double d = std::abs(bf16_bits(h_paged[i]) - bf16_bits(h_cascade[i]));
    diff = std::isnan(d) ? INFINITY : std::max(diff, d);
  }
  // The two-stream call on the same inputs (the same kernels; only the streams differ).
  check(cudaMemsetAsync(out_cascade.p, 0xFF, std::size_t(q_elems) * 2, stream), "poison");
  cascade_call(0, flashkit::Algo::automatic, false, side_stream)();
  check(cudaStreamSynchronize(stream), "two-stream call");
  std::vector<std::uint16_t> h_two(h_paged.size());
  check(cudaMemcpy(h_two.data(), out_cascade.p, h_two.size() * 2, cudaMemcpyDeviceToHost), "out");
  double diff_two = 0;  // vs plain paged decode, as `diff`; equal to it when the bits match
  for (std::size_t i = 0; i < h_paged.size(); ++i) {
    const double d = std::abs(bf16_bits(h_paged[i]) - bf16_bits(h_two[i]));
    diff_two = std::isnan(d) ? 1.0 : std::max(diff_two, d);
  }
  double ref_paged = 0, ref_cascade = 0;
  for (int b : {0, c.batch - 1}) {
    ref_paged = std::max(ref_paged, reference_error(c, b, paged, cols, h_paged));
    ref_cascade = std::max(ref_cascade, reference_error(c, b, paged, cols, h_cascade));
  }

  auto per_set = [&](const std::function<std::function<void()>(int)>& make) {
    std::vector<std::function<void()>> calls;
    for (int s = 0; s < sets; ++s) calls.push_back(make(s));
    return graph_ms(calls, stream);
  };
  const double tokens = double(c.prefix) + c.suffix;
  const double bpt = c.kv_bytes_per_token();
  std::vector<CascadeRow> rows;
  rows.push_back({"flashkit-paged", c,
                  per_set([&](int s) { return paged_call(s, *d_paged, out_paged.p); }),
                  c.batch * tokens * bpt, 0, ref_paged});
  rows.push_back({"flashkit-paged-private", c,
                  per_set([&](int s) { return paged_call(s, *d_priv, out_paged.p); }),
                  c.batch * tokens * bpt, -1, -1});
  rows.push_back({"flashkit-cascade", c,
                  per_set([&](int s) { return cascade_call(s, flashkit::Algo::automatic); }),
                  (c.prefix + double(c.batch) * c.suffix) * bpt, diff, ref_cascade});
  rows.push_back({"flashkit-cascade-2stream", c, per_set([&](int s) {
                    return cascade_call(s, flashkit::Algo::automatic, false, side_stream);
                  }),
                  (c.prefix + double(c.batch) * c.suffix) * bpt, diff_two, -1});
  rows.push_back({"flashkit-cascade-decode", c,
                  per_set([&](int s) { return cascade_call(s, flashkit::Algo::fa1); }),
                  (c.prefix + double(c.batch) * c.suffix) * bpt, -1, -1});
  if (diagnose) {
    // The shared level's key splits capped (cascade.cpp's FLASHKIT_CASCADE_SPLITS), one stream
    // and two: fewer splits write fewer partial states and leave SM room for the suffix level.
    for (int cap : {8, 4}) {
      const std::string n = std::to_string(cap);
      setenv("FLASHKIT_CASCADE_SPLITS", n.c_str(), 1);
      rows.push_back({"diag-cascade-splits" + n, c,
                      per_set([&](int s) { return cascade_call(s, flashkit::Algo::automatic); }),
                      (c.prefix + double(c.batch) * c.suffix) * bpt, -1, -1});
      rows.push_back({"diag-cascade-2stream-splits" + n, c, per_set([&](int s) {
                        return cascade_call(s, flashkit::Algo::automatic, false, side_stream);
                      }),
                      (c.prefix + double(c.batch) * c.suffix) * bpt, -1, -1});
      unsetenv("FLASHKIT_CASCADE_SPLITS");
    }
    rows.push_back({"diag-cascade-empty-prefix", c, per_set([&](int s) {
                      return cascade_call(s, flashkit::Algo::automatic, /*empty_prefix=*/true);
                    }),
                    c.batch * double(c.suffix) * bpt, -1, -1});
    // The suffix level of input set s as the cascade runs it: unsplit paged decode.
    auto suffix_args = [&](int s) {
      flashkit::PagedAttentionArgs a;
      a.q = q_t;
      a.out = Tensor(out_paged.p, DType::bf16, {c.batch, 1, kHeadsQ, kDim}, dev);
      a.kv.k_pages = k_t;
      a.kv.v_pages = v_t;
      a.kv.block_table = Tensor(d_suffix->as<std::int32_t>() + std::int64_t(s) * c.batch * sp,
                                DType::i32, {c.batch, sp}, dev);
      a.kv.seq_lens = Tensor(d_suffix_lens->p, DType::i32, {c.batch}, dev);
      a.mask.causal = true;
      a.num_splits = 1;
      a.stream = stream;
      return a;
    };
    auto suffix_level = [&](int s) {
      const flashkit::PagedAttentionArgs a = suffix_args(s);
      return std::function<void()>([a] { flashkit::paged_attention(a); });
    };
    rows.push_back({"diag-suffix-level-only", c, per_set(suffix_level),
                    c.batch * double(c.suffix) * bpt, -1, -1});
    // The suffix level on the kernel instance that folds the shared level's states in (as the
    // one-stream step runs it), with `states` of them from the workspace, read warm: what the
    // fold costs by itself.
    auto suffix_fold = [&](int states) {
      return [&, states](int s) {
        const flashkit::PagedAttentionArgs a = suffix_args(s);
        const flashkit::core::PagedDims dims = flashkit::core::validate_paged(a, 1);
        const std::int64_t o_elems = std::int64_t(c.batch) * kHeadsQ * kDim;
        const std::int64_t lse_elems = std::int64_t(c.batch) * kHeadsQ;
        const std::int64_t ws_states = cascade_elems / (o_elems + lse_elems);
        flashkit::cuda::PriorStates priors;
        priors.o = cascade_ws.as<float>();
        priors.lse = cascade_ws.as<float>() + ws_states * o_elems;
        priors.states = states;
        priors.o_state = o_elems;
        priors.o_row = kHeadsQ * kDim;
        priors.o_head = kDim;
        priors.lse_state = lse_elems;
        priors.lse_row = 1;
        priors.lse_head = c.batch;
        return std::function<void()>(
            [a, dims, priors] { flashkit::cuda::paged_attention(a, dims, priors); });
      };
    };
    for (int states : {8, 1}) {
      rows.push_back({"diag-suffix-level-fold" + std::to_string(states), c,
                      per_set(suffix_fold(states)), c.batch * double(c.suffix) * bpt, -1, -1});
    }
    // The same kernel twice in one graph: what a kernel boundary between two such levels costs.
    rows.push_back({"diag-suffix-level-twice", c, per_set([&](int s) {
                      const std::function<void()> once = suffix_level(s);
                      return std::function<void()>([once] { once(), once(); });
                    }),
                    2 * c.batch * double(c.suffix) * bpt, -1, -1});
    // The shared level alone, as cascade_attention runs it on one stream (core/cascade.cpp,
    // shared_split): the paged forward over the prefix, GQA groups packed into tiles' rows, the
    // keys split so that the CTAs fill the SMs once (sm90: 128-row tiles, 128-key multiples),
    // f32 partial states into the workspace; with the prefix and with none.
    const std::int64_t rows_q = c.batch, tiles = (rows_q * kGroup + 127) / 128 * kHeadsKv;
    const std::int64_t splits = std::clamp<std::int64_t>(sms / tiles, 1, 16);
    const std::int64_t o_elems = rows_q * kHeadsQ * kDim;
    const std::int64_t states = cascade_elems / (rows_q * kHeadsQ * (kDim + 1));
    flashkit::cuda::PagedFwdOptions split;
    split.key_splits = int(splits);
    split.split_keys = int(std::max<std::int64_t>(256, (c.prefix / splits + 127) / 128 * 128));
    split.out_stride = o_elems;
    split.lse_stride = rows_q * kHeadsQ;
    split.pack_gqa = true;
    auto shared_level = [&](bool empty) {
      return [&, empty](int s) {
        flashkit::PagedAttentionArgs a;
        a.q = Tensor(q.p, DType::bf16, {1, rows_q, kHeadsQ, kDim}, dev);
        a.out = Tensor(cascade_ws.p, DType::f32, {1, rows_q, kHeadsQ, kDim}, dev);
        a.lse = Tensor(cascade_ws.as<float>() + states * o_elems, DType::f32, {1, kHeadsQ, rows_q},
                       {rows_q * kHeadsQ, rows_q, 1}, dev);
        a.kv.k_pages = k_t;
        a.kv.v_pages = v_t;
        a.kv.block_table = Tensor(d_shared->as<std::int32_t>() + s * std::max(pp, 1), DType::i32,
                                  {1, std::max(pp, 1)}, dev);
        a.kv.seq_lens =
            Tensor(d_prefix_len->as<std::int32_t>() + (empty ? 1 : 0), DType::i32, {1}, dev);
        a.stream = stream;
        const flashkit::core::PagedDims dims = flashkit::core::validate_paged(a, 1);
        return std::function<void()>(
            [a, dims, split] { flashkit::cuda::paged_fwd(a, dims, split); });
      };
    };
    for (bool empty : {false, true}) {
      rows.push_back({empty ? "diag-shared-level-only-empty-prefix" : "diag-shared-level-only", c,
                      per_set(shared_level(empty)), empty ? 0.0 : double(c.prefix) * bpt, -1, -1});
    }
    if (timeline) {
      // Kernel by kernel (kernel_timeline.hpp): the cascade's step on one stream and on two, over
      // an empty prefix, and its levels alone.
      auto record = [&](const std::string& impl,
                        const std::function<std::function<void()>(int)>& make) {
        std::vector<std::function<void()>> calls;
        for (int s = 0; s < sets; ++s) calls.push_back(make(s));
        const std::vector<cudaGraphExec_t> graphs = capture_graphs(calls, stream);
        timelines.push_back({impl, c, graph_timeline(graphs, stream, 30)});
        for (cudaGraphExec_t e : graphs) cudaGraphExecDestroy(e);
      };
      record("flashkit-cascade", [&](int s) { return cascade_call(s, flashkit::Algo::automatic); });
      record("flashkit-cascade-2stream",
             [&](int s) { return cascade_call(s, flashkit::Algo::automatic, false, side_stream); });
      record("diag-cascade-empty-prefix", [&](int s) {
        return cascade_call(s, flashkit::Algo::automatic, /*empty_prefix=*/true);
      });
      record("diag-suffix-level-only", suffix_level);
      record("diag-suffix-level-fold8", suffix_fold(8));
      record("diag-suffix-level-fold1", suffix_fold(1));
      record("diag-shared-level-only", shared_level(false));
      record("diag-shared-level-only-empty-prefix", shared_level(true));
    }
  }
  return rows;
}

// ---------------------------------------------------------------------------------------------
// paged_prefill suite: q_len new tokens per sequence against kv_len cached ones (causal).

struct PrefillRow {
  std::string impl;
  int batch, kv_len, q_len;
  double ms, tflops, max_diff;
};

std::vector<PrefillRow> run_prefill_config(int batch, int kv_len, int q_len, cudaStream_t stream) {
  const Device dev = Device::cuda(0);
  const int pages = kv_len / page_size;
  const std::int64_t num_pages = std::int64_t(batch) * pages;
  const std::int64_t pool_elems = num_pages * page_size * kTokenElems;
  Buffer k(std::size_t(pool_elems) * 2), v(std::size_t(pool_elems) * 2);
  fill_bf16<<<2048, 256, 0, stream>>>(k.as<__nv_bfloat16>(), pool_elems, kSeedK);
  fill_bf16<<<2048, 256, 0, stream>>>(v.as<__nv_bfloat16>(), pool_elems, kSeedV);
  const std::int64_t q_elems = std::int64_t(batch) * q_len * kHeadsQ * kDim;
  Buffer q(std::size_t(q_elems) * 2), out_a(std::size_t(q_elems) * 2),
      out_b(std::size_t(q_elems) * 2);
  fill_bf16<<<256, 256, 0, stream>>>(q.as<__nv_bfloat16>(), q_elems, kSeedQ);
  std::vector<std::int32_t> table(static_cast<std::size_t>(num_pages));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937(7));
  Buffer d_table(table.size() * 4), d_lens(std::size_t(batch) * 4);
  check(cudaMemcpy(d_table.p, table.data(), table.size() * 4, cudaMemcpyHostToDevice), "table");
  const std::vector<std::int32_t> lens(std::size_t(batch), kv_len);
  check(cudaMemcpy(d_lens.p, lens.data(), lens.size() * 4, cudaMemcpyHostToDevice), "lens");

  auto args = [&](void* out) {
    flashkit::PagedAttentionArgs a;
    a.q = Tensor(q.p, DType::bf16, {batch, q_len, kHeadsQ, kDim}, dev);
    a.out = Tensor(out, DType::bf16, {batch, q_len, kHeadsQ, kDim}, dev);
    a.kv.k_pages = Tensor(k.p, DType::bf16, {num_pages, page_size, kHeadsKv, kDim}, dev);
    a.kv.v_pages = Tensor(v.p, DType::bf16, {num_pages, page_size, kHeadsKv, kDim}, dev);
    a.kv.block_table = Tensor(d_table.p, DType::i32, {batch, pages}, dev);
    a.kv.seq_lens = Tensor(d_lens.p, DType::i32, {batch}, dev);
    a.mask.causal = true;
    a.num_splits = 1;
    a.stream = stream;
    return a;
  };
  const flashkit::PagedAttentionArgs decode_args = args(out_a.p), tc_args = args(out_b.p);
  const flashkit::core::PagedDims dims = flashkit::core::validate_paged(tc_args, 1);
  auto decode = [&] { flashkit::cuda::paged_attention(decode_args, dims); };
  auto tensor_cores = [&] { flashkit::cuda::paged_fwd(tc_args, dims); };
  auto routed = [&] { flashkit::paged_attention(tc_args); };
  decode();
  tensor_cores();
  check(cudaStreamSynchronize(stream), "prefill calls");
  std::vector<std::uint16_t> a(static_cast<std::size_t>(q_elems)), b(a.size());
  check(cudaMemcpy(a.data(), out_a.p, a.size() * 2, cudaMemcpyDeviceToHost), "out");
  check(cudaMemcpy(b.data(), out_b.p, b.size() * 2, cudaMemcpyDeviceToHost), "out");
  double diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(bf16_bits(a[i]) - bf16_bits(b[i]));
    diff = std::isnan(d) ? INFINITY : std::max(diff, d);
  }
  // Causal bottom-right: query i sees kv_len - q_len + i + 1 keys.
  const double flops =
      4.0 * batch * kHeadsQ * kDim * (double(q_len) * kv_len - 0.5 * q_len * (q_len - 1.0));
  std::vector<PrefillRow> rows;
  for (auto [impl, call] :
       {std::pair<const char*, std::function<void()>>{"flashkit-paged-decode", decode},
        {"flashkit-paged-tensor-core", tensor_cores},
        {"flashkit-paged", routed}}) {
    const double ms = graph_ms({call}, stream);
    rows.push_back({impl, batch, kv_len, q_len, ms, flops / (ms * 1e-3) / 1e12, diff});
  }
  return rows;
}

// The kernels of each timed graph in start order (kernel_timeline.hpp), as JSON and a table.
void write_timelines(const std::string& path, const std::string& head) {
  std::ofstream f(path);
  f << "{\"suite\": \"cascade_timeline\", " << head << ",\n \"rows\": [";
  for (std::size_t i = 0; i < timelines.size(); ++i) {
    const TimelineRow& r = timelines[i];
    std::printf("\n%s (batch %d, prefix %d, suffix %d): span %.1f us\n", r.impl.c_str(), r.c.batch,
                r.c.prefix, r.c.suffix, r.t.span_us);
    f << (i ? ",\n  " : "\n  ") << "{\"impl\": \"" << r.impl
      << "\", \"config\": {\"batch\": " << r.c.batch << ", \"prefix\": " << r.c.prefix
      << ", \"suffix\": " << r.c.suffix << ", \"page_size\": " << page_size
      << "}, \"span_us\": " << r.t.span_us << ", \"kernels\": " << timeline_kernels_json(r.t)
      << "}";
    print_timeline_kernels(r.t);
  }
  f << "\n]}\n";
}

std::string versions_json() {
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  std::ostringstream f;
  f << "{\"cuda_runtime\": " << runtime << ", \"cuda_driver\": " << driver << ", \"flashkit\": \""
    << flashkit::version() << "\"}";
  return f.str();
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = ".", commit = "unknown";
  std::vector<Config> configs = {{64, 4096, 256}, {16, 4096, 256},  {128, 4096, 256},
                                 {64, 1024, 256}, {64, 16384, 256}, {64, 4096, 64},
                                 {64, 4096, 512}, {16, 16384, 512}, {128, 1024, 64}};
  bool chosen = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    Config c{};
    if (a == "--out" && i + 1 < argc) {
      dir = argv[++i];
    } else if (a == "--commit" && i + 1 < argc) {
      commit = argv[++i];
    } else if (a == "--page" && i + 1 < argc && std::sscanf(argv[i + 1], "%d", &page_size) == 1 &&
               page_size >= 1 && page_size <= 256 && (page_size & (page_size - 1)) == 0) {
      ++i;
    } else if (a == "--timeline" && timeline_available()) {
      timeline = true;
    } else if (a == "--config" && i + 1 < argc &&
               std::sscanf(argv[i + 1], "%d,%d,%d", &c.batch, &c.prefix, &c.suffix) == 3 &&
               c.batch > 0 && c.prefix >= 0 && c.prefix % page_size == 0 && c.suffix > 0) {
      if (!chosen) configs.clear();
      chosen = true;
      configs.push_back(c);
      ++i;
    } else {
      std::fprintf(
          stderr,
          "usage: %s --out DIR [--commit SHA] [--page N] [--config BATCH,PREFIX,SUFFIX ...]\n"
          "          [--timeline]\n"
          "  (N a power of two <= 256, given before --config; PREFIX a multiple of %d,\n"
          "  SUFFIX >= 1; --timeline where built with CUPTI: %s)\n",
          argv[0], page_size, timeline_available() ? "yes" : "no");
      return 2;
    }
  }
  try {
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    cudaStream_t stream = nullptr;
    check(cudaStreamCreate(&stream), "cudaStreamCreate");
    cudaStream_t side_stream = nullptr;  // cascade's suffix level, for the 2stream rows
    check(cudaStreamCreateWithFlags(&side_stream, cudaStreamNonBlocking), "cudaStreamCreate");
    const std::string head = std::string("\"commit\": \"") + commit + "\", \"date\": \"" +
                             now_utc() + "\", \"device\": \"" + prop.name +
                             "\",\n \"versions\": " + versions_json();

    std::vector<CascadeRow> rows;
    for (const Config& c : configs) {
      for (CascadeRow& r : run_cascade_config(c, prop.multiProcessorCount, double(prop.l2CacheSize),
                                              &c == &configs[0], stream, side_stream)) {
        rows.push_back(r);
      }
    }
    std::ofstream f(dir + "/cascade.json");
    f << "{\"suite\": \"cascade\", " << head << ",\n \"rows\": [";
    std::printf("%-24s %5s %6s %6s %9s %8s %8s %9s %9s\n", "impl", "batch", "prefix", "suffix",
                "ms", "GB/s", "speedup", "vs_paged", "vs_ref");
    bool ok = true;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const CascadeRow& r = rows[i];
      double paged_ms = r.ms;
      for (const CascadeRow& p : rows) {
        if (p.impl == "flashkit-paged" && p.c.batch == r.c.batch && p.c.prefix == r.c.prefix &&
            p.c.suffix == r.c.suffix) {
          paged_ms = p.ms;
        }
      }
      const double gbs = r.kv_bytes / (r.ms * 1e-3) / 1e9;
      f << (i ? ",\n  " : "\n  ") << "{\"impl\": \"" << r.impl
        << "\", \"config\": {\"batch\": " << r.c.batch << ", \"prefix\": " << r.c.prefix
        << ", \"suffix\": " << r.c.suffix << ", \"page_size\": " << page_size
        << ", \"dtype\": \"bf16\", \"heads_q\": " << kHeadsQ << ", \"heads_kv\": " << kHeadsKv
        << ", \"d\": " << kDim << ", \"q_len\": 1}, \"graph\": true, \"ms\": " << r.ms
        << ", \"gbs\": " << gbs << ", \"kv_bytes\": " << r.kv_bytes
        << ", \"speedup_vs_paged\": " << paged_ms / r.ms;
      if (r.err_vs_paged >= 0) f << ", \"max_abs_diff_vs_paged\": " << r.err_vs_paged;
      if (r.err_vs_reference >= 0) f << ", \"max_abs_err_sampled\": " << r.err_vs_reference;
      f << "}";
      std::printf("%-24s %5d %6d %6d %9.4f %8.0f %7.2fx %9.2e %9.2e\n", r.impl.c_str(), r.c.batch,
                  r.c.prefix, r.c.suffix, r.ms, gbs, paged_ms / r.ms, r.err_vs_paged,
                  r.err_vs_reference);
      ok = ok && r.err_vs_paged < 2e-2 && r.err_vs_reference < 2e-2;  // a few bf16 ulps
    }
    f << "\n]}\n";
    f.close();
    if (timeline) write_timelines(dir + "/cascade_timeline.json", head);

    cudaStreamDestroy(side_stream);
    if (chosen) {
      cudaStreamDestroy(stream);
      return ok ? 0 : 1;
    }
    std::vector<PrefillRow> prefill;
    for (int batch : {1, 4, 16}) {
      for (int q_len : {1, 4, 8, 16, 32, 48, 64, 256, 1024}) {
        for (PrefillRow& r : run_prefill_config(batch, 4096, q_len, stream)) prefill.push_back(r);
      }
    }
    std::ofstream g(dir + "/paged_prefill.json");
    g << "{\"suite\": \"paged_prefill\", " << head << ",\n \"rows\": [";
    std::printf("\n%-28s %5s %6s %6s %9s %8s %9s\n", "impl", "batch", "kv_len", "q_len", "ms",
                "TFLOP/s", "diff");
    for (std::size_t i = 0; i < prefill.size(); ++i) {
      const PrefillRow& r = prefill[i];
      g << (i ? ",\n  " : "\n  ") << "{\"impl\": \"" << r.impl
        << "\", \"config\": {\"batch\": " << r.batch << ", \"kv_len\": " << r.kv_len
        << ", \"q_len\": " << r.q_len << ", \"page_size\": " << page_size
        << ", \"dtype\": \"bf16\", \"heads_q\": " << kHeadsQ << ", \"heads_kv\": " << kHeadsKv
        << ", \"d\": " << kDim << ", \"causal\": true}, \"graph\": true, \"ms\": " << r.ms
        << ", \"tflops\": " << r.tflops
        << ", \"max_abs_diff_decode_vs_tensor_core\": " << r.max_diff << "}";
      std::printf("%-28s %5d %6d %6d %9.4f %8.1f %9.2e\n", r.impl.c_str(), r.batch, r.kv_len,
                  r.q_len, r.ms, r.tflops, r.max_diff);
      ok = ok && r.max_diff < 3e-2;
    }
    g << "\n]}\n";
    cudaStreamDestroy(stream);
    if (!ok) std::printf("WARNING: outputs differ beyond a few bf16 ulps\n");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench failed: %s\n", e.what());
    return 1;
  }
}
