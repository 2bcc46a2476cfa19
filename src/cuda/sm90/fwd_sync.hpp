// How the sm90 forward's warpgroups synchronise.
//
// mbarriers (shared memory) carry the TMA pipeline: a full barrier per stage and operand that
// the producer's copies complete, and an empty barrier per stage and operand that the 256
// consumer threads arrive on once their wgmma has read it. K and V are released separately: K
// once S = Q K^T is done, V once P V is done, so the next K can land while P V still runs.
//
// Named barriers (FwdNamedBarrier) order the two consumer warpgroups: the epilogue's shared-memory
// staging (128 threads each), and the pingpong schedule, where each warpgroup issues its two
// GEMMs only after the other has issued its own (256 threads: one side syncs, the other arrives),
// so one warpgroup's softmax runs while the other's GEMMs hold the tensor cores.
#pragma once

#include <cstdint>

namespace flashkit::cuda::sm90 {

inline constexpr int kFwdStages = 2;

struct FwdBarriers {
  std::uint64_t q_full;
  std::uint64_t k_full[kFwdStages], v_full[kFwdStages];
  std::uint64_t k_empty[kFwdStages], v_empty[kFwdStages];
};

// 0 is __syncthreads'.
enum class FwdNamedBarrier : int {
  epilogue_wg1 = 1,
  epilogue_wg2 = 2,
  schedule_wg1 = 3,  // warpgroup 1 may issue its GEMMs
  schedule_wg2 = 4,
};

}  // namespace flashkit::cuda::sm90
