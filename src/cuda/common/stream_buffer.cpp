#include "cuda/common/stream_buffer.hpp"

#include <mutex>
#include <unordered_map>

namespace flashkit::cuda {

namespace {

// One pool per device for the process's lifetime: pools hold no memory beyond what they keep,
// and destroying one at exit could race a stream still freeing into it.
struct Pools {
  std::mutex mutex;
  std::unordered_map<int, cudaMemPool_t> by_device;
};

Pools& pools() {
  static Pools p;
  return p;
}

}  // namespace

cudaMemPool_t scratch_pool() {
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  Pools& p = pools();
  const std::lock_guard<std::mutex> lock(p.mutex);
  if (const auto it = p.by_device.find(device); it != p.by_device.end()) return it->second;
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t pool = nullptr;
  check_cuda(cudaMemPoolCreate(&pool, &props), "cudaMemPoolCreate");
  std::uint64_t keep = kScratchKeepBytesPerDevice;
  check_cuda(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
             "cudaMemPoolSetAttribute(release threshold)");
  p.by_device.emplace(device, pool);
  return pool;
}

std::uint64_t scratch_reserved_bytes() {
  Pools& p = pools();
  const std::lock_guard<std::mutex> lock(p.mutex);
  std::uint64_t total = 0;
  for (const auto& [device, pool] : p.by_device) {
    std::uint64_t reserved = 0;
    check_cuda(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved),
               "cudaMemPoolGetAttribute(reserved memory)");
    total += reserved;
  }
  return total;
}

void release_scratch() {
  Pools& p = pools();
  const std::lock_guard<std::mutex> lock(p.mutex);
  for (const auto& [device, pool] : p.by_device) {
    check_cuda(cudaMemPoolTrimTo(pool, 0), "cudaMemPoolTrimTo");
  }
}

}  // namespace flashkit::cuda
