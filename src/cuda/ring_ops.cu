// Ring attention's steps between attention calls on CUDA: a warp per (batch, row, head) row of
// a [batch, n, heads, d] view, its lanes over the head dim. These move a shard's f32 state once
// per chunk pair (~12 bytes an element for a merge), where the attention call it follows reads
// K and V for every query block; they are plain loads and stores.
#include "cuda/ring_ops.hpp"

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <initializer_list>
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

// kVec consecutive elements of a row per lane: 4 (one 16-byte f32 access) where every view's rows
// start 16-byte aligned (8 for a 16-bit out) with unit stride along d and d % 4 == 0, which the
// ring's own buffers and dense outputs are; else 1. A warp then moves a d = 128 f32 row in one
// access per lane instead of 4 dependent ones.
template <int kVec>
struct Vec {
  float x[kVec];
};

template <int kVec>
__device__ __forceinline__ Vec<kVec> load_f32(const float* p) {
  Vec<kVec> v;
  if constexpr (kVec == 4) {
    const float4 f = *reinterpret_cast<const float4*>(p);
    v.x[0] = f.x, v.x[1] = f.y, v.x[2] = f.z, v.x[3] = f.w;
  } else {
    v.x[0] = *p;
  }
  return v;
}

template <int kVec>
__device__ __forceinline__ void store_as(void* base, DType dtype, std::int64_t i,
                                         const Vec<kVec>& v) {
  if constexpr (kVec == 4) {
    if (dtype == DType::f32) {
      *reinterpret_cast<float4*>(static_cast<float*>(base) + i) =
          make_float4(v.x[0], v.x[1], v.x[2], v.x[3]);
      return;
    }
    uint2 packed;  // four 16-bit values, one 8-byte store
    if (dtype == DType::bf16) {
      const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x[0], v.x[1]);
      const __nv_bfloat162 hi = __floats2bfloat162_rn(v.x[2], v.x[3]);
      packed.x = *reinterpret_cast<const unsigned*>(&lo);
      packed.y = *reinterpret_cast<const unsigned*>(&hi);
    } else {
      const __half2 lo = __floats2half2_rn(v.x[0], v.x[1]);
      const __half2 hi = __floats2half2_rn(v.x[2], v.x[3]);
      packed.x = *reinterpret_cast<const unsigned*>(&lo);
      packed.y = *reinterpret_cast<const unsigned*>(&hi);
    }
    *reinterpret_cast<uint2*>(static_cast<char*>(base) + i * 2) = packed;
  } else {
    store_from_float(base, dtype, i, v.x[0]);
  }
}

// out = the merge of (acc_o, acc_lse) and (part_o, part_lse); out may be acc itself.
template <int kVec>
__global__ void __launch_bounds__(32 * kWarps)
    merge_kernel(RowGrid g, RowView acc_o, RowView acc_lse, RowView part_o, RowView part_lse,
                 RowView out_o, RowView out_lse, bool in_place) {
  const std::int64_t r = warp_row();
  if (r >= g.rows) return;
  const float al = static_cast<const float*>(acc_lse.data)[row_offset(acc_lse, g, r)];
  const float pl = static_cast<const float*>(part_lse.data)[row_offset(part_lse, g, r)];
  const core::MergeWeights<float> w = core::merge_weights(al, pl);
  const bool part_seen = w.w_b != 0.0f;  // else its o may hold anything: not read
  if (!part_seen && in_place) return;
  const float* ao = static_cast<const float*>(acc_o.data) + row_offset(acc_o, g, r);
  const float* po = static_cast<const float*>(part_o.data) + row_offset(part_o, g, r);
  const std::int64_t o0 = row_offset(out_o, g, r);
  for (std::int64_t e = (threadIdx.x % 32) * kVec; e < g.dim; e += 32 * kVec) {
    Vec<kVec> v = load_f32<kVec>(ao + e);
    if (part_seen) {
      const Vec<kVec> p = load_f32<kVec>(po + e);
#pragma unroll
      for (int j = 0; j < kVec; ++j) v.x[j] = w.w_a * v.x[j] + w.w_b * p.x[j];
    }
    store_as<kVec>(out_o.data, out_o.dtype, o0 + e, v);
  }
  __syncwarp();  // in place: every lane read the old lse before lane 0 replaces it
  if (threadIdx.x % 32 == 0) {
    static_cast<float*>(out_lse.data)[row_offset(out_lse, g, r)] = part_seen ? w.lse : al;
  }
}

// out = acc + part; out may be acc itself.
template <int kVec>
__global__ void __launch_bounds__(32 * kWarps)
    add_kernel(RowGrid g, RowView out, RowView acc, RowView part) {
  const std::int64_t r = warp_row();
  if (r >= g.rows) return;
  const float* a = static_cast<const float*>(acc.data) + row_offset(acc, g, r);
  const float* p = static_cast<const float*>(part.data) + row_offset(part, g, r);
  const std::int64_t o0 = row_offset(out, g, r);
  for (std::int64_t e = (threadIdx.x % 32) * kVec; e < g.dim; e += 32 * kVec) {
    Vec<kVec> v = load_f32<kVec>(a + e);
    const Vec<kVec> q = load_f32<kVec>(p + e);
#pragma unroll
    for (int j = 0; j < kVec; ++j) v.x[j] += q.x[j];
    store_as<kVec>(out.data, out.dtype, o0 + e, v);
  }
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

template <int kVec>
__global__ void __launch_bounds__(32 * kWarps) fill_kernel(RowGrid g, RowView t, float value) {
  const std::int64_t r = warp_row();
  if (r >= g.rows) return;
  const std::int64_t o0 = row_offset(t, g, r);
  Vec<kVec> v;
#pragma unroll
  for (int j = 0; j < kVec; ++j) v.x[j] = value;
  for (std::int64_t e = (threadIdx.x % 32) * kVec; e < g.dim; e += 32 * kVec) {
    store_as<kVec>(t.data, t.dtype, o0 + e, v);
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

// True when kernels of kVec = 4 may run on these [batch, n, heads, d] views: unit stride along d,
// d % 4 == 0, and every row start 16-byte aligned for f32 (8-byte for 16-bit dtypes).
bool rows_take_vec4(std::initializer_list<const Tensor*> views) {
  for (const Tensor* t : views) {
    const std::int64_t align = t->dtype() == DType::f32 ? 16 : 8;
    if (t->stride(3) != 1 || t->size(3) % 4 != 0) return false;
    if (reinterpret_cast<std::uintptr_t>(t->data()) % std::uintptr_t(align) != 0) return false;
    for (int i = 0; i < 3; ++i) {
      if (t->stride(i) % 4 != 0) return false;
    }
  }
  return true;
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
  const RowGrid g = grid_of(t);
  if (g.rows == 0) return;
  auto* const launch = rows_take_vec4({&t}) ? fill_kernel<4> : fill_kernel<1>;
  launch<<<blocks_for(g, t), 32 * kWarps, 0, as_stream(stream)>>>(g, rows_view(t), value);
  check_launch("ring fill kernel");
}

void ring_merge(const Tensor& acc_o, const Tensor& acc_lse, const Tensor& part_o,
                const Tensor& part_lse, const Tensor& out_o, const Tensor& out_lse, void* stream) {
  const RowGrid g = grid_of(acc_o);
  if (g.rows == 0) return;
  const bool in_place = out_o.data() == acc_o.data() && out_lse.data() == acc_lse.data();
  const unsigned blocks = blocks_for(g, acc_o);
  auto* const launch =
      rows_take_vec4({&acc_o, &part_o, &out_o}) ? merge_kernel<4> : merge_kernel<1>;
  launch<<<blocks, 32 * kWarps, 0, as_stream(stream)>>>(
      g, rows_view(acc_o), rows_view(acc_lse), rows_view(part_o), rows_view(part_lse),
      rows_view(out_o), rows_view(out_lse), in_place);
  check_launch("ring merge kernel");
}

void ring_add(const Tensor& out, const Tensor& acc, const Tensor& part, void* stream) {
  const RowGrid g = grid_of(acc);
  if (g.rows == 0) return;
  auto* const launch = rows_take_vec4({&out, &acc, &part}) ? add_kernel<4> : add_kernel<1>;
  launch<<<blocks_for(g, acc), 32 * kWarps, 0, as_stream(stream)>>>(
      g, rows_view(out), rows_view(acc), rows_view(part));
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
