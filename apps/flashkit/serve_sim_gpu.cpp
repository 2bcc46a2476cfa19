#include "serve_sim_gpu.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "flashkit/cascade.hpp"
#include "flashkit/error.hpp"
#include "flashkit/paged.hpp"

namespace flashkit::app {

namespace {

constexpr std::int64_t kHeadsQ = 32, kHeadsKv = 8, kDim = 128, kPage = 16;

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw Error(std::string("CUDA ") + what + ": " + cudaGetErrorString(status));
  }
}

struct Buffer {
  void* p = nullptr;
  explicit Buffer(std::size_t bytes) {
    check(cudaMalloc(&p, std::max<std::size_t>(bytes, 16)), "cudaMalloc");
  }
  ~Buffer() { cudaFree(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

// Fills `bytes` of device memory with random bf16 values in [-1, 1): one host block, repeated.
void fill_random_bf16(void* dst, std::size_t bytes, std::uint32_t seed) {
  std::vector<std::uint16_t> block(std::size_t(1) << 20);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (std::uint16_t& x : block) {
    const float f = unit(rng);
    std::uint32_t bits;
    std::memcpy(&bits, &f, 4);
    x = std::uint16_t(bits >> 16);
  }
  for (std::size_t off = 0; off < bytes; off += block.size() * 2) {
    check(cudaMemcpy(static_cast<char*>(dst) + off, block.data(),
                     std::min(block.size() * 2, bytes - off), cudaMemcpyHostToDevice),
          "fill");
  }
}

template <class T>
void upload(const Buffer& dst, const std::vector<T>& host) {
  check(cudaMemcpy(dst.p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
}

double median_ms(const std::function<void()>& step) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  for (int i = 0; i < 3; ++i) step();
  std::vector<float> ms(20);
  for (float& t : ms) {
    check(cudaEventRecord(start), "cudaEventRecord");
    step();
    check(cudaEventRecord(stop), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    check(cudaEventElapsedTime(&t, start, stop), "cudaEventElapsedTime");
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

bool decode_step_gpu_present() {
  int count = 0;
  const bool present = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  cudaGetLastError();
  return present;
}

DecodeStepTiming time_decode_step(const DecodeStepShape& s) {
  DecodeStepTiming t;
  t.shape = s;
  if (!decode_step_gpu_present() || s.batch <= 0 || s.suffix <= 0) return t;
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  t.device = prop.name;
  t.measured = true;

  // Pool: the prefix's pages, then each request's own pages.
  const std::int64_t prefix_pages = (s.prefix + kPage - 1) / kPage;
  const std::int64_t own_pages = (s.suffix + kPage - 1) / kPage;
  const std::int64_t num_pages = prefix_pages + s.batch * own_pages;
  const std::size_t pool_bytes = std::size_t(num_pages * kPage * kHeadsKv * kDim) * 2;
  Buffer k(pool_bytes), v(pool_bytes), q(std::size_t(s.batch * kHeadsQ * kDim) * 2),
      out(std::size_t(s.batch * kHeadsQ * kDim) * 2);
  fill_random_bf16(k.p, pool_bytes, 1);
  fill_random_bf16(v.p, pool_bytes, 2);
  fill_random_bf16(q.p, std::size_t(s.batch * kHeadsQ * kDim) * 2, 3);

  // Plain decode sees the prefix + own tokens; with a prefix ending mid-page its own tokens start
  // on a fresh page in the cascade layout, so the plain table counts whole prefix pages.
  const std::int64_t plain_cols = prefix_pages + own_pages;
  std::vector<std::int32_t> plain(std::size_t(s.batch * plain_cols)),
      own(std::size_t(s.batch * own_pages)),
      shared(std::size_t(std::max<std::int64_t>(prefix_pages, 1)), 0);
  for (std::int64_t i = 0; i < prefix_pages; ++i) shared[std::size_t(i)] = std::int32_t(i);
  for (std::int64_t b = 0; b < s.batch; ++b) {
    for (std::int64_t i = 0; i < prefix_pages; ++i)
      plain[std::size_t(b * plain_cols + i)] = std::int32_t(i);
    for (std::int64_t i = 0; i < own_pages; ++i) {
      const auto page = std::int32_t(prefix_pages + b * own_pages + i);
      plain[std::size_t(b * plain_cols + prefix_pages + i)] = page;
      own[std::size_t(b * own_pages + i)] = page;
    }
  }
  Buffer d_plain(plain.size() * 4), d_own(own.size() * 4), d_shared(shared.size() * 4),
      d_lens(std::size_t(s.batch) * 4), d_own_lens(std::size_t(s.batch) * 4), d_prefix(4);
  upload(d_plain, plain);
  upload(d_own, own);
  upload(d_shared, shared);
  upload(d_lens, std::vector<std::int32_t>(std::size_t(s.batch),
                                           std::int32_t(prefix_pages * kPage + s.suffix)));
  upload(d_own_lens, std::vector<std::int32_t>(std::size_t(s.batch), std::int32_t(s.suffix)));
  upload(d_prefix, std::vector<std::int32_t>{std::int32_t(prefix_pages * kPage)});

  const Device dev = Device::cuda(0);
  const Tensor q_t(q.p, DType::bf16, {s.batch, 1, kHeadsQ, kDim}, dev);
  const Tensor out_t(out.p, DType::bf16, {s.batch, 1, kHeadsQ, kDim}, dev);
  const Tensor k_t(k.p, DType::bf16, {num_pages, kPage, kHeadsKv, kDim}, dev);
  const Tensor v_t(v.p, DType::bf16, {num_pages, kPage, kHeadsKv, kDim}, dev);

  const PagedSplitPlan plan = plan_paged_split(s.batch, 1, kHeadsQ, kHeadsKv, kDim,
                                               plain_cols * kPage, prop.multiProcessorCount);
  Buffer paged_ws(std::size_t(plan.workspace_elems) * 4);
  PagedAttentionArgs p;
  p.q = q_t;
  p.out = out_t;
  p.kv.k_pages = k_t;
  p.kv.v_pages = v_t;
  p.kv.block_table = Tensor(d_plain.p, DType::i32, {s.batch, plain_cols}, dev);
  p.kv.seq_lens = Tensor(d_lens.p, DType::i32, {s.batch}, dev);
  p.mask.causal = true;
  p.num_splits = plan.num_splits;
  if (plan.workspace_elems > 0) {
    p.workspace = Tensor(paged_ws.p, DType::f32, {plan.workspace_elems}, dev);
  }

  const std::int64_t ws_elems = cascade_workspace_elems(s.batch, 1, kHeadsQ, kDim);
  Buffer cascade_ws(std::size_t(ws_elems) * 4);
  CascadeAttentionArgs c;
  c.q = q_t;
  c.out = out_t;
  c.shared.k_pages = c.suffix.k_pages = k_t;
  c.shared.v_pages = c.suffix.v_pages = v_t;
  c.shared.block_table = Tensor(d_shared.p, DType::i32, {1, std::int64_t(shared.size())}, dev);
  c.shared.seq_lens = Tensor(d_prefix.p, DType::i32, {1}, dev);
  c.suffix.block_table = Tensor(d_own.p, DType::i32, {s.batch, own_pages}, dev);
  c.suffix.seq_lens = Tensor(d_own_lens.p, DType::i32, {s.batch}, dev);
  c.workspace = Tensor(cascade_ws.p, DType::f32, {ws_elems}, dev);
  c.mask.causal = true;

  t.paged_ms = median_ms([&] { paged_attention(p); });
  t.cascade_ms = median_ms([&] { cascade_attention(c); });
  check(cudaDeviceSynchronize(), "decode step");
  return t;
}

}  // namespace flashkit::app
