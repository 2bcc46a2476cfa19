// Paged decode, stage 1 (and all of v1): one CTA per (sequence, KV head, key split, tile of query
// rows) streams its keys through the block table once for all the tile's query rows
// (decode_cta.cuh: which work; decode_mainloop.cuh: the key loop; decode_epilogue.cuh: merge
// and store).
#pragma once

#include "cuda/decode/decode_cta.cuh"
#include "cuda/decode/decode_epilogue.cuh"
#include "cuda/decode/decode_mainloop.cuh"
#include "cuda/decode/decode_params.hpp"
#include "cuda/decode/decode_shape.cuh"

namespace flashkit::cuda::decode {

template <class KvElem, int kHeadDim, int kRows>
__global__ void __launch_bounds__(DecodeShape<KvElem, kHeadDim, kRows>::kThreads,
                                  DecodeShape<KvElem, kHeadDim, kRows>::kMinBlocks)
    paged_decode_kernel(const __grid_constant__ PagedParams p) {
  using Shape = DecodeShape<KvElem, kHeadDim, kRows>;
  const DecodeCta c = decode_cta<kRows, Shape::kStepKeys>(p);
  if (c.rows == 0) return;  // a tile past this sequence's queries (packed batches)
  extern __shared__ __align__(16) unsigned char smem[];  // Shape::kSmemBytes
  LaneState<Shape> s;
  load_queries(p, c, s);
  stream_keys<KvElem>(p, c, s, smem);
  finish_cta(p, c, s, smem);
}

}  // namespace flashkit::cuda::decode
