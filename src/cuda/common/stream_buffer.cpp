#include "cuda/common/stream_buffer.hpp"

#include <mutex>
#include <unordered_map>

namespace flashkit::cuda {

cudaMemPool_t scratch_pool() {
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  // One pool per device for the process's lifetime: pools hold no memory beyond what they keep,
  // and destroying one at exit could race a stream still freeing into it.
  static std::mutex mutex;
  static std::unordered_map<int, cudaMemPool_t> pools;
  const std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = pools.find(device); it != pools.end()) return it->second;
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t pool = nullptr;
  check_cuda(cudaMemPoolCreate(&pool, &props), "cudaMemPoolCreate");
  std::uint64_t keep = kScratchKeepBytes;
  check_cuda(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
             "cudaMemPoolSetAttribute(release threshold)");
  pools.emplace(device, pool);
  return pool;
}

}  // namespace flashkit::cuda
