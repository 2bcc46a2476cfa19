// The paged decode backend on CUDA: entry points that core/paged_dispatch.cpp calls for tensors
// on a CUDA device (already validated by core::validate_paged / validate_append). Each adds the
// kernels' own limits and throws flashkit::Error naming the argument before anything is launched.
// Plain C++ (no CUDA headers), so core code can include it.
//
// Split-K workspace (f32, args.workspace, core::paged_workspace_elems elements; the one
// definition of the count lives in core/validate.hpp next to plan_paged_split):
//   o   [num_splits, rows, heads_q, head_dim_v]  each split's normalised partial output
//   lse [num_splits, rows, heads_q]              its natural-log lse (-inf: the split saw no key)
// the lse block right after the o block. rows = batch * q_len, and query i of sequence b is row
// b * q_len + i; packed queries (cu_seqlens_q) use their packed row, rows = total_q. Stage 1
// writes every (split, row, head) of it, empty splits included, so stage 2 never reads garbage.
#pragma once

#include <cstdint>

#include "core/paged_problem.hpp"
#include "flashkit/paged.hpp"

namespace flashkit::cuda {

// One CTA per (sequence, KV head, key split, tile of query rows): every query head of the GQA
// group and every query token share each K/V row the CTA loads. dims.num_splits == 1 writes out
// and lse directly (v1); more splits write the workspace and a second kernel merges them (v2).
// No allocation and no host synchronisation: capturable in a CUDA graph on args.stream.
void paged_attention(const PagedAttentionArgs& args, const core::PagedDims& dims);

// Partial (o, lse) states of the same queries over other keys, f32 on the call's device (the
// shared level of cascade attention): `states` of them, strides in elements. Query row r counts
// as the split-K workspace's rows do (b * q_len + token; the packed row with cu_seqlens_q).
struct PriorStates {
  const float* o = nullptr;  // [state][row][head][head_dim_v] under the strides below
  const float* lse = nullptr;
  int states = 0;
  std::int64_t o_state = 0, o_row = 0, o_head = 0;
  std::int64_t lse_state = 0, lse_row = 0, lse_head = 0;
};

// The same call, its result merged with `priors` before out and lse are written (the weights of
// merge_states, in one fixed order: this call's own state, then the priors in order), so that no
// merge kernel follows. Only where paged_attention_folds says so (flashkit::Error otherwise).
void paged_attention(const PagedAttentionArgs& args, const core::PagedDims& dims,
                     const PriorStates& priors);

// Whether the call runs on a kernel instance that folds prior states: one key split on the
// tensor-core kernels with f16 or bf16 pages, at 2-4 warps a CTA (decode::mma_folds).
bool paged_attention_folds(const PagedAttentionArgs& args, const core::PagedDims& dims);

// Writes k_new / v_new into their pages (e4m3 pages: value / scale, round to nearest even,
// saturating at +-448).
void append_kv(const AppendKVArgs& args, const core::AppendDims& dims);

}  // namespace flashkit::cuda
