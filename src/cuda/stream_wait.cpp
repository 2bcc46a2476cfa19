#include "cuda/stream_wait.hpp"

#include <cuda_runtime.h>

#include <map>

#include "cuda/common/cuda_check.hpp"

namespace flashkit::cuda {

namespace {

// One event per (thread, device), recorded again by every call: cudaStreamWaitEvent waits for
// the record made just before it, so a later record does not move an earlier wait. Never
// destroyed: a thread's few events live as long as its CUDA context.
cudaEvent_t thread_event(int which = 0) {
  thread_local std::map<int, cudaEvent_t> events[2];
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  cudaEvent_t& e = events[which][device];
  if (e == nullptr) {
    check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  }
  return e;
}

}  // namespace

void stream_wait(void* waiting, void* signalling) {
  const cudaEvent_t e = thread_event();
  check_cuda(cudaEventRecord(e, static_cast<cudaStream_t>(signalling)), "cudaEventRecord");
  check_cuda(cudaStreamWaitEvent(static_cast<cudaStream_t>(waiting), e, 0), "cudaStreamWaitEvent");
}

void* started_event() {
  return thread_event(1);
}

void stream_wait_started(void* waiting) {
  check_cuda(cudaStreamWaitEvent(static_cast<cudaStream_t>(waiting), thread_event(1), 0),
             "cudaStreamWaitEvent");
}

void* helper_stream() {
  thread_local std::map<int, cudaStream_t> streams;
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  cudaStream_t& s = streams[device];
  if (s == nullptr) {
    check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  }
  return s;
}

}  // namespace flashkit::cuda
