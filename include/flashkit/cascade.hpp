// Cascade (shared-prefix) attention for decode and append: requests that share a prompt prefix
// attend to its KV once, as one shared paged sequence, and to their own suffix separately; the two
// partial states are merged with merge_states. The result equals paged_attention over each
// request's prefix + suffix, without storing the prefix once per request. On CUDA the shared
// level runs on tensor cores (docs/kernels/cascade.md); nothing is allocated or synchronised, so
// a call can be captured in a CUDA graph.
#pragma once

#include <cstdint>
#include <optional>

#include "flashkit/attention.hpp"
#include "flashkit/paged.hpp"
#include "flashkit/tensor.hpp"

namespace flashkit {

struct CascadeAttentionArgs {
  // [batch, q_len, heads_q, d]: each request's new query tokens (the last q_len of its suffix).
  // With q_len > 1, one stride over batch and tokens (q.stride(0) == q_len * q.stride(1)): the
  // shared level reads all batch * q_len queries as one sequence.
  Tensor q;
  // ONE sequence holding the shared prefix: block_table i32 [1, max_pages], seq_lens i32 [1].
  // Any length, 0 included (then the result is plain suffix attention).
  PagedKV shared;
  // Each request's own tokens after the prefix, including its q_len new tokens at the end:
  // block_table [batch, max_pages], seq_lens [batch]. Its pages may be the shared level's pool;
  // a suffix starts at slot 0 of a page even when the prefix ends mid-page.
  PagedKV suffix;
  Tensor out;  // like q
  Tensor lse;  // optional f32 [batch, heads_q, q_len]
  // Contiguous f32 scratch of at least cascade_workspace_elems() elements on q's device (16-byte
  // aligned on CUDA): the levels' partial outputs and lse (on CUDA the shared level writes one
  // partial state per key split).
  Tensor workspace;
  std::optional<float> softmax_scale;
  // causal (bottom-right) applies to the suffix level only: every query sees the whole prefix.
  // softcap applies to both. window, alibi and prefix_len are refused: key positions across the
  // two levels are not modelled.
  Mask mask;
  // CUDA: automatic and fa2 run the shared level on tensor cores where they can (f16 / bf16 pages
  // of q's dtype, head dims 64, 128, 256); other values, and calls the tensor cores cannot run,
  // take the decode kernels. CPU: as paged_attention.
  Algo algo = Algo::automatic;
  void* stream = nullptr;
  // CUDA, optional: a second stream (cudaStream_t) on q's device. Where the shared level leaves
  // at least half of the SMs idle (short prefixes, small batches), the suffix level runs on it
  // beside the shared level, forked from and joined back into `stream` with events: the call
  // stays ordered on `stream` as a whole, and capturable. Where the shared level fills the GPU,
  // the call stays on `stream` (measured slower on two; docs/kernels/cascade.md). On sm90 a
  // short shared level (splits of <= 1024 keys) is split to fill half of the SMs instead of all
  // of them, so that the suffix level runs beside it, and without a side stream the call forks
  // onto a stream of the library's own (one per thread and device) the same way; the suffix
  // level starts once every CTA of the shared level has (H100, batch 64, a 4k prefix, 256-token
  // suffixes: 51.9 against 62.8 us with the two levels one after the other).
  // CPU: ignored.
  void* side_stream = nullptr;
};

// (1 + shared splits) * batch * q_len * heads_q * (head_dim_v + 1), the splits chosen so the
// shared level fills a GPU (1..16; fewer the more query rows there are).
std::int64_t cascade_workspace_elems(std::int64_t batch, std::int64_t q_len, std::int64_t heads_q,
                                     std::int64_t head_dim_v);

void cascade_attention(const CascadeAttentionArgs& args);

}  // namespace flashkit
