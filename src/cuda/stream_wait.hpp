// Ordering between two streams of the current device, for calls whose parts run concurrently
// (cascade's two levels): `waiting` waits for the work queued on `signalling` so far. A fork is
// stream_wait(side, main), a join stream_wait(main, side); both are legal under stream capture,
// where they become graph edges. Plain C++ (no CUDA headers), so core code can include it.
#pragma once

namespace flashkit::cuda {

void stream_wait(void* waiting, void* signalling);

}  // namespace flashkit::cuda
