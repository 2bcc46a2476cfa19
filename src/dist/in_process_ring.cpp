// The in-process ring: ranks are threads of this process. A shift is two barriers: every rank
// posts its send and recv buffers, all check every rank's pair (so a mismatch throws on every rank
// alike, and none is left waiting), each copies from its left neighbour's send buffer, and the
// second barrier keeps senders from reusing a buffer that is still being read.
//
// CUDA tensors: the copy is queued on the receiver's stream behind an event its left neighbour
// recorded on its own stream when it posted (the send buffer's contents are ready there), and
// the sender's stream waits for an event recorded after its right neighbour's copy (its send
// buffer is free again). Each event is recorded before the barrier that precedes every wait on it,
// and recorded again only after the barrier that follows those waits.
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/checks.hpp"
#include "flashkit/error.hpp"
#include "flashkit/ring.hpp"
#if FLASHKIT_HAVE_CUDA
#include "cuda/ring_ops.hpp"
#endif

namespace flashkit {

namespace {

using core::num;

std::int64_t bytes_of(const Tensor& t) {
  return t.numel() * std::int64_t(dtype_size(t.dtype()));
}

bool overlap(const Tensor& a, const Tensor& b) {
  const auto* a0 = static_cast<const char*>(a.data());
  const auto* b0 = static_cast<const char*>(b.data());
  return a0 < b0 + bytes_of(b) && b0 < a0 + bytes_of(a) && bytes_of(a) > 0 && bytes_of(b) > 0;
}

class RingState {
 public:
  explicit RingState(int ranks)
      : ranks_(ranks),
        send_(std::size_t(ranks)),
        recv_(std::size_t(ranks)),
        posting_error_(std::size_t(ranks))
#if FLASHKIT_HAVE_CUDA
        ,
        ready_(std::size_t(ranks)),
        copied_(std::size_t(ranks))
#endif
  {
  }

  void shift(int rank, const Tensor& send, const Tensor& recv, void* stream) {
    std::unique_lock<std::mutex> lock(mutex_);
    send_[std::size_t(rank)] = send;
    recv_[std::size_t(rank)] = recv;
    posting_error_[std::size_t(rank)].clear();
    const bool cuda = send.device().is_cuda();
    if (cuda) record_ready(rank, send, recv, stream);
    arrive_and_wait(lock);
    check_posted();
    const int left = (rank + ranks_ - 1) % ranks_;
    const Tensor& from = send_[std::size_t(left)];
    lock.unlock();
    if (cuda) {
      copy_on_device(rank, left, from, recv, stream);
    } else if (bytes_of(recv) > 0) {
      std::memcpy(recv.data(), from.data(), std::size_t(bytes_of(recv)));
    }
    lock.lock();
    arrive_and_wait(lock);
#if FLASHKIT_HAVE_CUDA
    if (cuda) copied_[std::size_t((rank + 1) % ranks_)]->wait(stream);
#endif
  }

  void abort() {
    std::lock_guard<std::mutex> lock(mutex_);
    aborted_ = true;
    wake_.notify_all();
  }

 private:
  void arrive_and_wait(std::unique_lock<std::mutex>& lock) {
    throw_if_aborted();
    const std::uint64_t generation = generation_;
    if (++arrived_ == ranks_) {
      arrived_ = 0;
      ++generation_;
      wake_.notify_all();
      return;
    }
    wake_.wait(lock, [&] { return aborted_ || generation_ != generation; });
    // A barrier that completed counts even if a rank aborted right after leaving it.
    if (generation_ == generation) throw_if_aborted();
  }

  // The rank's events, made on its device on its first CUDA shift, and the record that says its
  // send buffer is ready on `stream`. A rank whose buffers are not on its current device records
  // nothing and leaves the reason for check_posted, which every rank runs.
  void record_ready(int rank, const Tensor& send, const Tensor& recv, void* stream) {
    std::string& error = posting_error_[std::size_t(rank)];
#if FLASHKIT_HAVE_CUDA
    try {
      const int current = cuda::ring_current_device();
      for (const Tensor* t : {&send, &recv}) {
        if (t->device() != Device::cuda(current)) {
          error = std::string(t == &send ? "send" : "recv") + " of rank " + num(rank) + " on " +
                  t->device().str() + ", its current device cuda:" + num(current);
          return;
        }
      }
      auto& ready = ready_[std::size_t(rank)];
      if (!ready) {
        ready = std::make_unique<cuda::RingEvent>();
        copied_[std::size_t(rank)] = std::make_unique<cuda::RingEvent>();
      }
      ready->record(stream);
    } catch (const Error& e) {  // no device, say: reported at the check every rank runs
      error = "rank " + num(rank) + "'s " + e.what();
    }
#else
    (void)send, (void)recv, (void)stream;
    error = "CUDA tensors on rank " + num(rank) + " in a build without the CUDA backend";
#endif
  }

  void copy_on_device(int rank, int left, const Tensor& from, const Tensor& recv, void* stream) {
#if FLASHKIT_HAVE_CUDA
    ready_[std::size_t(left)]->wait(stream);
    cuda::ring_copy_bytes(recv.data(), recv.device().index, from.data(), from.device().index,
                          std::size_t(bytes_of(recv)), stream);
    copied_[std::size_t(rank)]->record(stream);
#else
    (void)rank, (void)left, (void)from, (void)recv, (void)stream;
#endif
  }

  void throw_if_aborted() const {
    if (aborted_) throw Error("ring: another rank's call failed, so this shift was abandoned");
  }

  // Every rank sees every pair: contiguous, the same size and dtype everywhere, no receive buffer
  // overlapping a buffer that some rank sends.
  void check_posted() const {
    for (const std::string& error : posting_error_) {
      if (!error.empty()) {
        throw Error("ring shift", "each rank's send and recv on its current CUDA device", error);
      }
    }
    const Tensor& first = send_[0];
    for (int r = 0; r < ranks_; ++r) {
      for (const Tensor* t : {&send_[std::size_t(r)], &recv_[std::size_t(r)]}) {
        const std::string name =
            std::string(t == &send_[std::size_t(r)] ? "send" : "recv") + " of rank " + num(r);
        if (!t->is_contiguous() || t->device().kind != first.device().kind) {
          throw Error("ring shift",
                      std::string("contiguous tensors on every rank, all on ") +
                          (first.device().is_cpu() ? "the CPU" : "CUDA devices") +
                          " as rank 0's send",
                      name + " is not");
        }
        if (t->dtype() != first.dtype() || t->numel() != first.numel()) {
          throw Error("ring shift",
                      "one dtype and size on every rank (rank 0 sends " + num(first.numel()) + " " +
                          dtype_name(first.dtype()) + ")",
                      num(t->numel()) + " " + dtype_name(t->dtype()) + " in the " + name);
        }
      }
      for (int s = 0; s < ranks_; ++s) {
        if (overlap(recv_[std::size_t(r)], send_[std::size_t(s)])) {
          throw Error("ring shift", "receive buffers apart from every send buffer",
                      "rank " + num(r) + "'s recv overlapping rank " + num(s) + "'s send");
        }
      }
    }
  }

  const int ranks_;
  std::mutex mutex_;
  std::condition_variable wake_;
  int arrived_ = 0;
  std::uint64_t generation_ = 0;
  bool aborted_ = false;
  std::vector<Tensor> send_, recv_;
  std::vector<std::string> posting_error_;
#if FLASHKIT_HAVE_CUDA
  std::vector<std::unique_ptr<cuda::RingEvent>> ready_, copied_;
#endif
};

class InProcessRank : public RingCommunicator {
 public:
  InProcessRank(std::shared_ptr<RingState> state, int rank, int size)
      : state_(std::move(state)), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void shift(const Tensor& send, const Tensor& recv, void* stream) override {
    state_->shift(rank_, send, recv, stream);
  }
  void abort() override { state_->abort(); }

 private:
  std::shared_ptr<RingState> state_;
  int rank_, size_;
};

}  // namespace

std::vector<std::unique_ptr<RingCommunicator>> make_in_process_ring(int ranks) {
  if (ranks < 1) throw Error("ranks", ">= 1", num(ranks));
  auto state = std::make_shared<RingState>(ranks);
  std::vector<std::unique_ptr<RingCommunicator>> ring;
  for (int r = 0; r < ranks; ++r) ring.push_back(std::make_unique<InProcessRank>(state, r, ranks));
  return ring;
}

}  // namespace flashkit
