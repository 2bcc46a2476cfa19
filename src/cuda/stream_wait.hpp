// Ordering between two streams of the current device, for calls whose parts run concurrently
// (cascade's two levels): `waiting` waits for the work queued on `signalling` so far. A fork is
// stream_wait(side, main), a join stream_wait(main, side); both are legal under stream capture,
// where they become graph edges. Plain C++ (no CUDA headers), so core code can include it.
#pragma once

namespace flashkit::cuda {

void stream_wait(void* waiting, void* signalling);

// A kernel whose launch records `started_event()` (PagedFwdOptions::started: every CTA of it
// has begun) lets another stream run beside it rather than after it: stream_wait_started(side)
// after that launch. Without it, a graph's two branches start in either order, and a branch of
// many small CTAs started first leaves the other's large CTAs no SM until it drains.
void* started_event();
void stream_wait_started(void* waiting);

// A stream (non-blocking) of this thread and the current device for a call's concurrent part
// where the caller gave none; created on first use, never destroyed (as the events above).
void* helper_stream();

}  // namespace flashkit::cuda
