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
  // contiguous tensors of one dtype and size on every rank. All ranks call it together; it
  // returns when `recv` holds the data and `send` may be written again. A mismatch between ranks
  // throws flashkit::Error on every rank.
  virtual void shift(const Tensor& send, const Tensor& recv) = 0;
  // Called by a rank whose call failed: the other ranks' pending and later shifts throw
  // flashkit::Error instead of waiting for it forever.
  virtual void abort() = 0;
};

// `ranks` communicators of one ring inside this process (threads, one per rank, sharing CPU
// memory): ring attention on the CPU backend, and the model the distributed tests check against.
std::vector<std::unique_ptr<RingCommunicator>> make_in_process_ring(int ranks);

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
// CPU, f32 [heads_q] or [batch, heads_q]); diagonal_offset must stay 0 (the ring sets it per
// chunk pair).
struct RingProblem {
  Tensor q, k, v;
  std::optional<float> softmax_scale;  // default 1/sqrt(d)
  Mask mask;
  RingLayout layout = RingLayout::zigzag;
  RingCommunicator* comm = nullptr;
};

struct RingAttentionArgs : RingProblem {
  Tensor out;  // [batch, L, heads_q, d_v], like attention_forward's
  Tensor lse;  // f32 [batch, heads_q, L]: required, the backward needs it
};

struct RingBackwardArgs : RingProblem {
  Tensor out, lse, dout;  // this rank's forward results and the gradient of out
  Tensor dq, dk, dv;      // this rank's shards' gradients (f32 or the input dtype)
};

// Every rank calls these together with its own shard. The CPU backend runs them; CUDA tensors
// get a flashkit::Error naming q.device (no NCCL path yet).
void ring_attention_forward(const RingAttentionArgs& args);
void ring_attention_backward(const RingBackwardArgs& args);

}  // namespace flashkit
