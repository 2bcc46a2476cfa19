// How the sm90 forward's warpgroups synchronise.
//
// mbarriers (shared memory) carry the TMA pipeline: a full barrier per stage and operand that
// the producer's copies complete, and an empty barrier per stage and operand that the consumer
// threads arrive on once their wgmma has read it. K and V are released separately: K once
// S = Q K^T is done, V once P V is done, so the next K can land while P V still runs. The stage
// and phase of a block come from the CTA's running count of blocks, over all its tiles.
//
// Q has one or two buffers (FwdTraits::kQBuffers, as shared memory allows), used by a CTA's
// tiles in turn: q_full completes when a tile's Q has landed; q_empty when every consumer
// warpgroup is done with the buffer, which also stages the tile's O for its TMA store, so one
// elected thread per warpgroup arrives once that store has read it. With two buffers the next
// tile's Q lands while this tile's last blocks and epilogue run. In d = 256's walk, with one, every
// consumer thread arrives once its last S = Q K^T is done, so the next Q lands under the last P V
// and the epilogue, and O is staged over the V stages instead (o_read; FwdTraits::
// kWalkReleasesQAfterS), whose next loads wait for its stores.
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
inline constexpr int kFwdMaxQBuffers = 2;

struct FwdBarriers {
  std::uint64_t q_full[kFwdMaxQBuffers], q_empty[kFwdMaxQBuffers];
  std::uint64_t k_full[kFwdStages], v_full[kFwdStages];
  std::uint64_t k_empty[kFwdStages], v_empty[kFwdStages];
  std::uint64_t fix;  // the producer's own, for a box it must see land (fwd_kv_source.cuh)
  // d = 256's walk (FwdTraits::kWalkReleasesQAfterS) stages a tile's O in its V stages: the
  // stores have read it, and the next tile's V may land (one elected thread per warpgroup).
  std::uint64_t o_read;
};

// 0 is __syncthreads'. Consumer c (0-based) uses epilogue + c and schedule + c.
enum class FwdNamedBarrier : int {
  epilogue = 1,
  schedule = 1 + kFwdMaxConsumers,    // schedule + c: consumer c may issue its GEMMs
  v_done = 1 + 2 * kFwdMaxConsumers,  // every consumer is past its last P V (O staged over V)
};

constexpr FwdNamedBarrier fwd_barrier_of(FwdNamedBarrier first, int consumer) {
  return FwdNamedBarrier(int(first) + consumer);
}

}  // namespace flashkit::cuda::sm90
