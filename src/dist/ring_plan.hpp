// What ring attention's steps are made of: the chunks of a shard (where they sit in it and where
// in the global sequence), which chunk pairs the mask lets meet, the buffers a rank holds
// (ring_buffers.cpp), and the loops that merge, add and copy the partial results between
// attention calls (ring_steps.cpp: on the CPU, or queued on a CUDA stream).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "core/mask_rules.hpp"
#include "flashkit/ring.hpp"

namespace flashkit::dist {

// Rows [local_start, local_start + len) of a shard: global chunk `global` (chunks are numbered
// in sequence order and all have the same length, so chunk g starts at token g * len).
struct Chunk {
  std::int64_t local_start, len, global;
  std::int64_t first_token() const { return global * len; }
};
std::vector<Chunk> shard_chunks(RingLayout layout, int ranks, int rank, std::int64_t local_seqlen);

// True when some query of chunk q may see some key of chunk kv under `rule` over the whole
// sequence of `total` tokens (queries and keys at the same positions, so no alignment shift).
bool chunks_meet(const core::MaskRule& rule, const Chunk& q, const Chunk& kv, std::int64_t total);

// Rows [start, start + len) of a [batch, L, heads, d] tensor, or columns of a [batch, heads, L]
// lse.
Tensor rows_of(const Tensor& t, std::int64_t start, std::int64_t len);
Tensor lse_columns(const Tensor& lse, std::int64_t start, std::int64_t len);

// True when every query of chunk q sees every key of chunk kv under `rule`, so their attention
// call needs no mask at all; never with ALiBi, whose scores need the positions.
bool pair_sees_everything(const core::MaskRule& rule, bool alibi, const Chunk& q, const Chunk& kv,
                          std::int64_t total);

// A contiguous buffer on the ring's device: CPU memory (zeroed), or CUDA memory from the scratch
// pool ordered on `stream` (uninitialised; freed on `stream` behind the work queued before).
class RingBuffer {
 public:
  RingBuffer(const Device& device, void* stream, DType dtype,
             std::initializer_list<std::int64_t> shape);
  ~RingBuffer();
  RingBuffer(const RingBuffer&) = delete;
  RingBuffer& operator=(const RingBuffer&) = delete;
  RingBuffer(RingBuffer&& other) noexcept;
  RingBuffer& operator=(RingBuffer&& other) noexcept;

  const Tensor& view() const { return view_; }

 private:
  void release();
  std::vector<std::uint64_t> host_;  // CPU storage, 8-byte aligned
  void* device_data_ = nullptr;      // CUDA storage
  void* stream_ = nullptr;
  Tensor view_;
};

// The loops between attention calls, on the tensors' device (CUDA: queued on `stream`).
// (out_o, out_lse) = the merge of (acc_o, acc_lse) and (part_o, part_lse), two states of the same
// query rows over disjoint keys (core::merge_weights): f32 [batch, n, heads, d] and [batch, heads,
// n] views; out_o in any float dtype (rounded), and out may be acc itself.
void merge_partial(const Tensor& acc_o, const Tensor& acc_lse, const Tensor& part_o,
                   const Tensor& part_lse, const Tensor& out_o, const Tensor& out_lse,
                   void* stream);
// out = acc + part: f32 acc and part [batch, n, heads, d] views, out in any float dtype (rounded)
// or acc itself.
void add_into(const Tensor& out, const Tensor& acc, const Tensor& part, void* stream);
// dst = src element by element (rank 3 or 4, any float dtypes, rounded to dst's).
void copy_into(const Tensor& dst, const Tensor& src, void* stream);
// Every element of an f32 [batch, n, heads, d] view set to `value`.
void fill(const Tensor& t, float value, void* stream);

}  // namespace flashkit::dist
