// How the sm90 forward's warpgroups synchronise.
//
// mbarriers (shared memory) carry the TMA pipeline: a full barrier per stage and operand that
// the producer's copies complete, and an empty barrier per stage and operand that the 256
// consumer threads arrive on once their wgmma has read it. K and V are released separately: K
// once S = Q K^T is done, V once P V is done, so the next K can land while P V still runs.
//
// Named barriers (FwdNamedBarrier) order the consumer warpgroups: the epilogue's shared-memory
// staging (128 threads each), and the pingpong schedule, where the warpgroups take turns in a
// ring to issue their two GEMMs (256 threads per barrier: a warpgroup syncs on its own, the one
// before it in the ring arrives), so one warpgroup's softmax runs while another's GEMMs hold the
// tensor cores.
#pragma once

#include <cstdint>

namespace flashkit::cuda::sm90 {

inline constexpr int kFwdStages = 2;
inline constexpr int kFwdMaxConsumers = 3;

struct FwdBarriers {
  std::uint64_t q_full;
  std::uint64_t k_full[kFwdStages], v_full[kFwdStages];
  std::uint64_t k_empty[kFwdStages], v_empty[kFwdStages];
};

// 0 is __syncthreads'. Consumer c (0-based) uses epilogue + c and schedule + c.
enum class FwdNamedBarrier : int {
  epilogue = 1,
  schedule = 1 + kFwdMaxConsumers,  // schedule + c: consumer c may issue its GEMMs
};

constexpr FwdNamedBarrier fwd_barrier_of(FwdNamedBarrier first, int consumer) {
  return FwdNamedBarrier(int(first) + consumer);
}

}  // namespace flashkit::cuda::sm90
