// The ring over NCCL: a shift is one grouped ncclSend to rank + 1 and ncclRecv from rank - 1 on
// the caller's stream, so NCCL runs both directions at once and the call only queues them. NCCL
// cannot see the other ranks' buffers, so the sizes are the caller's to keep equal (ring
// attention passes every rank's problem header around the ring before its first shard).
#include <cstring>
#include <memory>
#include <string>

#include "core/checks.hpp"
#include "flashkit/error.hpp"
#include "flashkit/ring.hpp"
#if FLASHKIT_HAVE_NCCL
#include <nccl.h>

#include "cuda/ring_ops.hpp"
#endif

namespace flashkit {

namespace {

using core::num;

#if FLASHKIT_HAVE_NCCL
static_assert(sizeof(ncclUniqueId) == sizeof(NcclRingId::bytes),
              "NcclRingId holds an ncclUniqueId");

void check_nccl(ncclResult_t status, const char* what) {
  if (status != ncclSuccess) {
    throw Error(std::string(what) + ": " + ncclGetErrorString(status) + " (" +
                ncclGetLastError(nullptr) + ")");
  }
}

class NcclRank : public RingCommunicator {
 public:
  NcclRank(const NcclRingId& id, int ranks, int rank)
      : rank_(rank), size_(ranks), device_(cuda::ring_current_device()) {
    ncclUniqueId uid;
    std::memcpy(&uid, id.bytes.data(), sizeof uid);
    check_nccl(ncclCommInitRank(&comm_, ranks, uid, rank), "ncclCommInitRank");
  }
  ~NcclRank() override {
    if (comm_ != nullptr) ncclCommDestroy(comm_);
  }
  NcclRank(const NcclRank&) = delete;
  NcclRank& operator=(const NcclRank&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void shift(const Tensor& send, const Tensor& recv, void* stream) override {
    if (comm_ == nullptr) throw Error("ring: this rank's NCCL communicator was aborted");
    for (const Tensor* t : {&send, &recv}) {
      const std::string name = t == &send ? "send" : "recv";
      if (t->device() != Device::cuda(device_) || !t->is_contiguous()) {
        throw Error(name, "a contiguous tensor on cuda:" + num(device_) + " (the communicator's)",
                    t->device().str() + (t->is_contiguous() ? "" : ", not contiguous"));
      }
    }
    const std::size_t bytes = std::size_t(send.numel()) * dtype_size(send.dtype());
    if (recv.numel() * std::int64_t(dtype_size(recv.dtype())) != std::int64_t(bytes)) {
      throw Error("recv", "as many bytes as send (" + num(std::int64_t(bytes)) + ")",
                  num(recv.numel() * std::int64_t(dtype_size(recv.dtype()))));
    }
    if (bytes == 0) return;
    if (size_ == 1) {
      cuda::ring_copy_bytes(recv.data(), device_, send.data(), device_, bytes, stream);
      return;
    }
    const auto s = static_cast<cudaStream_t>(stream);
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    check_nccl(ncclSend(send.data(), bytes, ncclUint8, (rank_ + 1) % size_, comm_, s), "ncclSend");
    check_nccl(ncclRecv(recv.data(), bytes, ncclUint8, (rank_ + size_ - 1) % size_, comm_, s),
               "ncclRecv");
    check_nccl(ncclGroupEnd(), "ncclGroupEnd");
  }

  void abort() override {
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
  }

 private:
  int rank_, size_, device_;
  ncclComm_t comm_ = nullptr;
};
#endif

void expect_nccl() {
#if !FLASHKIT_HAVE_NCCL
  throw Error("id", "a build with NCCL (none was found when flashkit was configured)", "none");
#endif
}

}  // namespace

NcclRingId nccl_ring_id() {
  expect_nccl();
  NcclRingId id;
#if FLASHKIT_HAVE_NCCL
  ncclUniqueId uid;
  check_nccl(ncclGetUniqueId(&uid), "ncclGetUniqueId");
  std::memcpy(id.bytes.data(), &uid, sizeof uid);
#endif
  return id;
}

std::unique_ptr<RingCommunicator> make_nccl_ring(const NcclRingId& id, int ranks, int rank) {
  expect_nccl();
  if (ranks < 1) throw Error("ranks", ">= 1", num(ranks));
  if (rank < 0 || rank >= ranks) throw Error("rank", "in [0, " + num(ranks) + ")", num(rank));
#if FLASHKIT_HAVE_NCCL
  return std::make_unique<NcclRank>(id, ranks, rank);
#else
  (void)id;
  return nullptr;
#endif
}

}  // namespace flashkit
