// The device side of ring attention's steps (src/dist/ring_attention.cpp): its buffers, the f32
// state merges and sums between attention calls, the copies a ring shift makes inside one process,
// and the events that order them across streams. Plain C++ (no CUDA headers), so src/dist can
// include it; every call runs on the current device, ordered on `stream` (a cudaStream_t).
#pragma once

#include <cstddef>

#include "flashkit/tensor.hpp"

namespace flashkit::cuda {

// Device memory from flashkit's scratch pool (common/stream_buffer.hpp), usable by work queued on
// `stream` after this call, and given back once the work queued on `stream` before ring_free is
// done.
void* ring_alloc(std::size_t bytes, void* stream);
void ring_free(void* ptr, void* stream);

// Every element of an f32 [batch, n, heads, d] view set to `value`.
void ring_fill(const Tensor& t, float value, void* stream);

// (out_o, out_lse) = the merge of (acc_o, acc_lse) and (part_o, part_lse): two states of the same
// query rows over disjoint keys (core::merge_weights), f32 [batch, n, heads, d] and f32 [batch,
// heads, n] views; out_o in f32, f16 or bf16, and (out_o, out_lse) may be (acc_o, acc_lse). A
// part row that saw no key (lse -inf) passes the accumulator's row on, whatever its o holds.
void ring_merge(const Tensor& acc_o, const Tensor& acc_lse, const Tensor& part_o,
                const Tensor& part_lse, const Tensor& out_o, const Tensor& out_lse, void* stream);

// out = acc + part over [batch, n, heads, d] views: acc and part f32, out f32, f16 or bf16 (or
// acc itself).
void ring_add(const Tensor& out, const Tensor& acc, const Tensor& part, void* stream);

// dst = src element by element, rounded to dst's dtype (f32, f16 or bf16): [batch, n, heads, d]
// views, or [batch, heads, n] lse views.
void ring_copy_into(const Tensor& dst, const Tensor& src, void* stream);

// `bytes` from `src` on device `src_device` to `dst` on device `dst_device` (equal or not),
// ordered on `stream` of the current device. Between two devices that can reach each other's
// memory, peer access is turned on first (once per pair and process), so the copy goes over
// NVLink or PCIe directly rather than through host memory.
void ring_copy_bytes(void* dst, int dst_device, const void* src, int src_device, std::size_t bytes,
                     void* stream);

// `bytes` between host and device memory, synchronously (the ring's problem headers).
void ring_copy_to_device(void* dst, const void* src, std::size_t bytes, void* stream);
void ring_copy_to_host(void* dst, const void* src, std::size_t bytes, void* stream);

// The device current in this thread.
int ring_current_device();

// A CUDA event of the device current when it is made: record() marks the work queued on a stream
// so far, wait() makes a stream of any device wait for the last record.
class RingEvent {
 public:
  RingEvent();
  ~RingEvent();
  RingEvent(const RingEvent&) = delete;
  RingEvent& operator=(const RingEvent&) = delete;

  void record(void* stream);
  void wait(void* stream) const;

 private:
  void* event_ = nullptr;  // cudaEvent_t
};

}  // namespace flashkit::cuda
