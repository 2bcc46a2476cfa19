// Ring attention's steps between attention calls on CUDA: a warp per (batch, row, head) row of
// a [batch, n, heads, d] view, its lanes over the head dim. These move a shard's f32 state once
// per chunk pair (~12 bytes an element for a merge), where the attention call it follows reads
// K and V for every query block; they are plain loads and stores.
#include "cuda/ring_ops.hpp"

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <mutex>
#include <set>
#include <utility>

#include "core/checks.hpp"
#include "core/softmax_state.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/dtype.cuh"
#include "cuda/common/stream_buffer.hpp"

namespace flashkit::cuda {

namespace {

constexpr int kWarps = 4;

// A [batch, n, heads, d] view, or a [batch, heads, n] lse view (d = 1, its strides reordered to
// [batch, n, heads, 0] so that both walk rows alike).
struct RowView {
  void* data;
  DType dtype;
  std::int64_t stride[4];
};

struct RowGrid {
  std::int64_t n, heads, dim, rows;  // rows = batch * n * heads
};

RowView rows_view(const Tensor& t) {
  if (t.rank() == 3) return {t.data(), t.dtype(), {t.stride(0), t.stride(2), t.stride(1), 0}};
  return {t.data(), t.dtype(), {t.stride(0), t.stride(1), t.stride(2), t.stride(3)}};
}

RowGrid grid_of(const Tensor& t) {
  if (t.rank() == 3) return {t.size(2), t.size(1), 1, t.size(0) * t.size(1) * t.size(2)};
  return {t.size(1), t.size(2), t.size(3), t.size(0) * t.size(1) * t.size(2)};
}

// Offset of row r's element 0.
__device__ __forceinline__ std::int64_t row_offset(const RowView& v, const RowGrid& g,
                                                   std::int64_t r) {
  const std::int64_t h = r % g.heads, i = (r / g.heads) % g.n, b = r / (g.heads * g.n);
  return b * v.stride[0] + i * v.stride[1] + h * v.stride[2];
}

__device__ __forceinline__ std::int64_t warp_row() {
  return std::int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
}

__global__ void __launch_bounds__(32 * kWarps)
    merge_into_kernel(RowGrid g, RowView acc_o, RowView acc_lse, RowView part_o, RowView part_lse) {
  const std::int64_t r = warp_row();
  if (r >= g.rows) return;
  float* al = static_cast<float*>(acc_lse.data) + row_offset(acc_lse, g, r);
  const float pl = static_cast<const float*>(part_lse.data)[row_offset(part_lse, g, r)];
  const core::MergeWeights<float> w = core::merge_weights(*al, pl);
  if (w.w_b == 0.0f) return;  // the part saw no key: its o may hold anything
  float* ao = static_cast<float*>(acc_o.data) + row_offset(acc_o, g, r);
  const float* po = static_cast<const float*>(part_o.data) + row_offset(part_o, g, r);
  for (std::int64_t e = threadIdx.x % 32; e < g.dim; e += 32) {
    ao[e] = w.w_a * ao[e] + w.w_b * po[e];
  }
  __syncwarp();  // every lane read the old lse before lane 0 replaces it
  if (threadIdx.x % 32 == 0) *al = w.lse;
}

__global__ void __launch_bounds__(32 * kWarps)
    add_into_kernel(RowGrid g, RowView acc, RowView part) {
  const std::int64_t r = warp_row();
  if (r >= g.rows) return;
  float* a = static_cast<float*>(acc.data) + row_offset(acc, g, r);
  const float* p = static_cast<const float*>(part.data) + row_offset(part, g, r);
  for (std::int64_t e = threadIdx.x % 32; e < g.dim; e += 32) a[e] += p[e];
}

__global__ void __launch_bounds__(32 * kWarps)
    copy_into_kernel(RowGrid g, RowView dst, RowView src) {
  const std::int64_t r = warp_row();
  if (r >= g.rows) return;
  const std::int64_t d0 = row_offset(dst, g, r), s0 = row_offset(src, g, r);
  for (std::int64_t e = threadIdx.x % 32; e < g.dim; e += 32) {
    store_from_float(dst.data, dst.dtype, d0 + e, load_as_float(src.data, src.dtype, s0 + e));
  }
}

__global__ void fill_kernel(float* data, std::int64_t n, float value) {
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    data[i] = value;
  }
}

unsigned blocks_for(const RowGrid& g, const Tensor& t) {
  const std::int64_t blocks = (g.rows + kWarps - 1) / kWarps;
  if (blocks > INT_MAX) {
    core::fail("ring shard", "fewer than 2^31 * 4 (batch, token, head) rows on cuda",
               t.shape_str());
  }
  return unsigned(blocks);
}

cudaStream_t as_stream(void* stream) {
  return static_cast<cudaStream_t>(stream);
}

// Lets `device` (the current one) reach `peer`'s memory, once per pair and process; a pair that
// cannot is left to cudaMemcpyPeerAsync's copy through the host.
void enable_peer_access(int device, int peer) {
  static std::mutex mutex;
  static std::set<std::pair<int, int>> done;
  std::lock_guard<std::mutex> lock(mutex);
  if (!done.insert({device, peer}).second) return;
  int can = 0;
  check_cuda(cudaDeviceCanAccessPeer(&can, device, peer), "cudaDeviceCanAccessPeer");
  if (!can) return;
  const cudaError_t status = cudaDeviceEnablePeerAccess(peer, 0);
  if (status == cudaErrorPeerAccessAlreadyEnabled) {
    cudaGetLastError();  // the caller (torch, say) enabled it: not an error to keep
    return;
  }
  check_cuda(status, "cudaDeviceEnablePeerAccess");
}

}  // namespace

void* ring_alloc(std::size_t bytes, void* stream) {
  void* ptr = nullptr;
  if (bytes > 0) {
    check_cuda(cudaMallocFromPoolAsync(&ptr, bytes, scratch_pool(), as_stream(stream)),
               "cudaMallocFromPoolAsync");
  }
  return ptr;
}

void ring_free(void* ptr, void* stream) {
  if (ptr != nullptr) cudaFreeAsync(ptr, as_stream(stream));
}

void ring_fill(const Tensor& t, float value, void* stream) {
  const std::int64_t n = t.numel();
  if (n == 0) return;
  const std::int64_t blocks = (n + 255) / 256;
  fill_kernel<<<unsigned(blocks < 4096 ? blocks : 4096), 256, 0, as_stream(stream)>>>(
      t.data_as<float>(), n, value);
  check_launch("ring fill kernel");
}

void ring_merge_into(const Tensor& acc_o, const Tensor& acc_lse, const Tensor& part_o,
                     const Tensor& part_lse, void* stream) {
  const RowGrid g = grid_of(acc_o);
  if (g.rows == 0) return;
  merge_into_kernel<<<blocks_for(g, acc_o), 32 * kWarps, 0, as_stream(stream)>>>(
      g, rows_view(acc_o), rows_view(acc_lse), rows_view(part_o), rows_view(part_lse));
  check_launch("ring merge kernel");
}

void ring_add_into(const Tensor& acc, const Tensor& part, void* stream) {
  const RowGrid g = grid_of(acc);
  if (g.rows == 0) return;
  add_into_kernel<<<blocks_for(g, acc), 32 * kWarps, 0, as_stream(stream)>>>(g, rows_view(acc),
                                                                             rows_view(part));
  check_launch("ring add kernel");
}

void ring_copy_into(const Tensor& dst, const Tensor& src, void* stream) {
  const RowGrid g = grid_of(dst);
  if (g.rows == 0) return;
  copy_into_kernel<<<blocks_for(g, dst), 32 * kWarps, 0, as_stream(stream)>>>(g, rows_view(dst),
                                                                              rows_view(src));
  check_launch("ring copy kernel");
}

void ring_copy_bytes(void* dst, int dst_device, const void* src, int src_device, std::size_t bytes,
                     void* stream) {
  if (bytes == 0) return;
  if (dst_device != src_device) enable_peer_access(dst_device, src_device);
  check_cuda(cudaMemcpyPeerAsync(dst, dst_device, src, src_device, bytes, as_stream(stream)),
             "cudaMemcpyPeerAsync");
}

void ring_copy_to_device(void* dst, const void* src, std::size_t bytes, void* stream) {
  check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, as_stream(stream)),
             "cudaMemcpyAsync");
  check_cuda(cudaStreamSynchronize(as_stream(stream)), "cudaStreamSynchronize");
}

void ring_copy_to_host(void* dst, const void* src, std::size_t bytes, void* stream) {
  check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, as_stream(stream)),
             "cudaMemcpyAsync");
  check_cuda(cudaStreamSynchronize(as_stream(stream)), "cudaStreamSynchronize");
}

int ring_current_device() {
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  return device;
}

RingEvent::RingEvent() {
  cudaEvent_t e = nullptr;
  check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  event_ = e;
}

RingEvent::~RingEvent() {
  cudaEventDestroy(static_cast<cudaEvent_t>(event_));
}

void RingEvent::record(void* stream) {
  check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(event_), as_stream(stream)),
             "cudaEventRecord");
}

void RingEvent::wait(void* stream) const {
  check_cuda(cudaStreamWaitEvent(as_stream(stream), static_cast<cudaEvent_t>(event_), 0),
             "cudaStreamWaitEvent");
}

}  // namespace flashkit::cuda
