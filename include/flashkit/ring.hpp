// Ring attention (context parallelism): a sequence too long for one device is sharded over R
// ranks by tokens. Each rank keeps its queries and passes its K/V shard around a ring: in R steps
// every query meets every key, and the partial results merge through the online-softmax state.
// The backward passes K, V and their gradient accumulators around the same ring, so each shard's
// dK / dV come home after R shifts. Only K/V shards (and, backward, their accumulators) move: a
// rank holds two at a time, the one it computes with and the one arriving.
//
// With a causal mask the contiguous layout (rank r holds tokens [r L, (r + 1) L)) gives rank r
// (r + 1/2) L^2 visible scores: the last rank 2R - 1 times the first one's work, and the ring
// steps wait for the slowest. The zigzag layout cuts the sequence into 2R chunks of L / 2 and
// gives rank r chunks r and 2R - 1 - r: 2R - 1 whole chunk pairs and 2 diagonal halves, the same
// R L^2 / 2 scores on every rank.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "flashkit/attention.hpp"
#include "flashkit/tensor.hpp"

namespace flashkit {

// One rank's end of a ring of ranks.
class RingCommunicator {
 public:
  virtual ~RingCommunicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Every rank sends `send` to rank + 1 and receives into `recv` what rank - 1 sent (mod size):
  // contiguous tensors of one dtype and size on every rank, all in CPU memory or all on CUDA
  // devices. All ranks call it together.
  // - CPU tensors: it returns when `recv` holds the data and `send` may be written again
  //   (`stream` is not used).
  // - CUDA tensors (on the current device): the exchange is queued on `stream`, a cudaStream_t of
  //   that device (null: its default stream), and the call returns; work queued on `stream` after
  //   it sees `recv`'s data and may write `send`.
  // A mismatch between ranks that the communicator can see throws flashkit::Error on every rank.
  virtual void shift(const Tensor& send, const Tensor& recv, void* stream) = 0;
  // Called by a rank whose call failed: the other ranks' pending and later shifts throw
  // flashkit::Error instead of waiting for it forever (in-process ring), or the communicator
  // is torn down (NCCL: its peers' NCCL calls fail or time out as NCCL decides).
  virtual void abort() = 0;
};

// `ranks` communicators of one ring inside this process (threads, one per rank): ring attention
// on the CPU backend and the model the distributed tests check against; with CUDA tensors the
// ranks' threads may use one device or several of this process (copies between them go
// device to device, ordered by events on each rank's stream).
std::vector<std::unique_ptr<RingCommunicator>> make_in_process_ring(int ranks);

// A ring over NCCL, one process (or thread) per rank and a CUDA device each: rank 0 makes the
// id, the caller hands it to every rank out of band (the bytes are plain data), and every rank
// makes its communicator with its own device current. Shifts are ncclSend / ncclRecv pairs on
// the caller's stream. Builds without NCCL throw flashkit::Error naming `id`.
struct NcclRingId {
  std::array<char, 128> bytes{};
};
NcclRingId nccl_ring_id();
std::unique_ptr<RingCommunicator> make_nccl_ring(const NcclRingId& id, int ranks, int rank);

enum class RingLayout : std::uint8_t {
  contiguous,  // rank r holds global tokens [r L, (r + 1) L)
  zigzag,      // 2R chunks of L / 2 tokens; rank r holds chunks r and 2R - 1 - r, in that order
};

// The global position of local token t on `rank` (L = local_seqlen, R = ranks).
std::int64_t ring_global_position(RingLayout layout, int ranks, int rank, std::int64_t local_seqlen,
                                  std::int64_t t);

// What forward and backward share. q [batch, L, heads_q, d], k / v [batch, L, heads_kv, d] are
// this rank's shard, L the same on every rank (even for zigzag). The mask is over global
// positions (queries and keys of the whole sequence share them, so `align` changes nothing):
// causal, sliding window, prefix-LM (prefix_len global tokens), softcap and ALiBi (slopes on the
// tensors' device, f32 [heads_q] or [batch, heads_q]); diagonal_offset must stay 0 (the ring sets
// it per chunk pair).
struct RingProblem {
  Tensor q, k, v;
  std::optional<float> softmax_scale;  // default 1/sqrt(d)
  Mask mask;
  RingLayout layout = RingLayout::zigzag;
  RingCommunicator* comm = nullptr;
  // Bit-identical gradients across runs (the attention calls' own reductions, as
  // AttentionProblem::deterministic; the ring's sums run in a fixed order either way).
  bool deterministic = false;
  // CUDA tensors: the cudaStream_t every step is ordered on (null: the default stream), and
  // optionally a second stream of the same device on which the shards travel while the attention
  // calls run (null or `stream`: one after the other on `stream`). The call returns once its work
  // is queued, like attention_forward.
  void* stream = nullptr;
  void* comm_stream = nullptr;
};

struct RingAttentionArgs : RingProblem {
  Tensor out;  // [batch, L, heads_q, d_v], like attention_forward's
  Tensor lse;  // f32 [batch, heads_q, L]: required, the backward needs it
};

struct RingBackwardArgs : RingProblem {
  Tensor out, lse, dout;  // this rank's forward results and the gradient of out
  Tensor dq, dk, dv;      // this rank's shards' gradients (f32 or the input dtype)
};

// Every rank calls these together with its own shard, on the CPU or on its CUDA device (which must
// be current); the attention calls of each step take the backend and kernel their tensors pick.
void ring_attention_forward(const RingAttentionArgs& args);
void ring_attention_backward(const RingBackwardArgs& args);

}  // namespace flashkit
