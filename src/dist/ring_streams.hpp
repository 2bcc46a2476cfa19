// The two streams of a ring attention call on CUDA and the points where they wait for each other:
// the attention calls and the loops between them run on `main`, the shifts on `comm`, so a shard
// travels while the rank computes with the one it holds. Without a second stream (or on the CPU,
// whose shifts return when done) every wait is a no-op and the steps run in call order.
#pragma once

#include <memory>

#include "flashkit/ring.hpp"
#if FLASHKIT_HAVE_CUDA
#include "cuda/ring_ops.hpp"
#endif

namespace flashkit::dist {

// What arrived on `comm`: the next K/V shard, or (backward) the dK/dV accumulator of the shard
// this rank computes with.
enum class Arrival { kv, grads };

class RingStreams {
 public:
  explicit RingStreams(const RingProblem& p);
  ~RingStreams();  // main waits for everything queued on comm (buffers are freed on main)
  RingStreams(const RingStreams&) = delete;
  RingStreams& operator=(const RingStreams&) = delete;

  void* main() const { return main_; }
  void* comm() const { return comm_; }
  // comm waits for the work queued on main so far (before a shift overwrites a buffer main used,
  // or sends one main wrote).
  void comm_waits_main();
  // Marks the shifts queued on comm so far as `what`; main_waits(what) makes main's later work
  // wait for them, and for nothing queued on comm after the mark.
  void mark(Arrival what);
  void main_waits(Arrival what);

 private:
  void* main_;
  void* comm_;
  bool separate_;
#if FLASHKIT_HAVE_CUDA
  std::unique_ptr<cuda::RingEvent> kv_, grads_;
#endif
};

}  // namespace flashkit::dist
