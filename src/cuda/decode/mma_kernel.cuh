// Paged decode v3, stage 1 on tensor cores: one CTA per (sequence, KV head, key split, tile of
// up to 8 query rows), the same work split as v1/v2 (decode_cta.cuh), with the products on
// mma.sync (mma_mainloop.cuh) and the same merge and store (mma_epilogue.cuh). sm80+.
#pragma once

#include "cuda/decode/decode_cta.cuh"
#include "cuda/decode/decode_params.hpp"
#include "cuda/decode/mma_epilogue.cuh"
#include "cuda/decode/mma_mainloop.cuh"
#include "cuda/decode/mma_shape.cuh"

namespace flashkit::cuda::decode {

// kFold: out and lse merged with the call's prior states (PagedParams::prior_*) as they are
// stored, an instance of its own (decode_epilogue.cuh, merge_warps_and_store).
template <class KvElem, int kHeadDim, int kWarps, bool kFold = false>
__global__ void __launch_bounds__(MmaShape<KvElem, kHeadDim, kWarps>::kThreads,
                                  MmaShape<KvElem, kHeadDim, kWarps>::kMinBlocks)
    paged_decode_mma_kernel(const __grid_constant__ PagedParams p) {
  using Shape = MmaShape<KvElem, kHeadDim, kWarps>;
  const DecodeCta c = decode_cta<Shape::kRowsPerCta, Shape::kStepKeys>(p);
  if (c.rows == 0) return;  // a tile past this sequence's queries (packed batches)
  extern __shared__ __align__(16) unsigned char smem[];  // Shape::kSmemBytes
  MmaLane<Shape> s;
  mma_stream_keys<KvElem>(p, c, s, smem);  // loads the queries once its first copies are issued
  mma_finish_cta<Shape, kFold>(p, c, s, smem);
}

}  // namespace flashkit::cuda::decode
