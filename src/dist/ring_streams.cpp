#include "dist/ring_streams.hpp"

#if FLASHKIT_HAVE_CUDA
#include "cuda/stream_wait.hpp"
#endif

namespace flashkit::dist {

RingStreams::RingStreams(const RingProblem& p)
    : main_(p.stream),
      comm_(p.comm_stream != nullptr ? p.comm_stream : p.stream),
      separate_(p.q.device().is_cuda() && comm_ != main_) {
#if FLASHKIT_HAVE_CUDA
  if (separate_) {
    kv_ = std::make_unique<cuda::RingEvent>();
    grads_ = std::make_unique<cuda::RingEvent>();
  }
#endif
}

RingStreams::~RingStreams() {
#if FLASHKIT_HAVE_CUDA
  if (separate_) {
    try {
      cuda::stream_wait(main_, comm_);
    } catch (...) {  // a failing runtime already failed the call; nothing more to order
    }
  }
#endif
}

void RingStreams::comm_waits_main() {
#if FLASHKIT_HAVE_CUDA
  if (separate_) cuda::stream_wait(comm_, main_);
#endif
}

void RingStreams::mark(Arrival what) {
#if FLASHKIT_HAVE_CUDA
  if (separate_) (what == Arrival::kv ? kv_ : grads_)->record(comm_);
#else
  (void)what;
#endif
}

void RingStreams::main_waits(Arrival what) {
#if FLASHKIT_HAVE_CUDA
  if (separate_) (what == Arrival::kv ? kv_ : grads_)->wait(main_);
#else
  (void)what;
#endif
}

}  // namespace flashkit::dist
