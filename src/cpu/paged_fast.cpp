// The fast path's schedule. v1 (one split): a task per (sequence, KV head) writes out and lse.
// v2 (S splits): stage 1 runs a task per (sequence, KV head, split) over 1/S of the sequence's
// pages and writes its partial (o, lse) to the workspace; stage 2 merges the S states of each
// query with the library's merge (cpu::merge, what merge_states runs), so the split path adds no
// second copy of the softmax-merge arithmetic.
//
// Workspace (f32): partial outputs [S, rows, heads_q, d_v], then partial lse [S, rows, heads_q],
// where rows are the query tokens of the whole batch (batch * q_len, or total_q when packed).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "cpu/cpu_backend.hpp"
#include "cpu/paged_backend.hpp"
#include "cpu/parallel.hpp"
#include "cpu/tiled_common.hpp"

namespace flashkit::cpu {

namespace {

// First row of sequence b in the batch's query tokens.
std::int64_t first_row(const paged::SeqQueries& s, std::int64_t b, const core::PagedDims& d) {
  return d.varlen_q ? s.q_start : b * d.q_len;
}

// Keys [k0, k1) of split `split`: whole pages, the sequence's pages dealt out evenly.
void split_keys(const paged::SeqQueries& s, const core::PagedDims& d, std::int64_t split,
                std::int64_t& k0, std::int64_t& k1) {
  const std::int64_t pages = (s.len_k + d.page_size - 1) / d.page_size;
  const std::int64_t per_split = (pages + d.num_splits - 1) / d.num_splits;
  k0 = std::min(s.len_k, split * per_split * d.page_size);
  k1 = std::min(s.len_k, k0 + per_split * d.page_size);
}

void run_unsplit(const PagedAttentionArgs& args, const core::PagedDims& d,
                 const std::vector<paged::SeqQueries>& seqs) {
  const auto lo = core::token_layout(args.out, d.varlen_q);
  const bool want_lse = args.lse.defined();
  const auto ll = want_lse ? core::lse_layout(args.lse, d.varlen_q) : core::TokenLayout{};
  parallel_for(d.batch * d.heads_kv, [&](std::int64_t task) {
    const std::int64_t b = task / d.heads_kv, hk = task % d.heads_kv;
    const paged::SeqQueries& s = seqs[std::size_t(b)];
    const std::int64_t rows = d.group() * s.len_q;
    std::vector<float> o(std::size_t(rows * d.head_dim_v)), lse(static_cast<std::size_t>(rows));
    paged::attend_keys(args, d, s, b, hk, 0, s.len_k, o.data(), lse.data());
    for (std::int64_t g = 0; g < d.group(); ++g) {
      const std::int64_t h = hk * d.group() + g;
      const tiled::HeadRows out = tiled::head_rows(args.out, lo, b, s.q_start, h);
      for (std::int64_t i = 0; i < s.len_q; ++i) {
        const std::int64_t r = g * s.len_q + i;
        tiled::store_row(out, i, d.head_dim_v, o.data() + r * d.head_dim_v, 1.0f);
        if (want_lse) {
          args.lse.data_as<float>()[core::element_offset(ll, b, s.q_start, i, h)] =
              lse[std::size_t(r)];
        }
      }
    }
  });
}

void run_split(const PagedAttentionArgs& args, const core::PagedDims& d,
               const std::vector<paged::SeqQueries>& seqs) {
  const std::int64_t splits = d.num_splits, hq = d.heads_q, dv = d.head_dim_v;
  const std::int64_t rows = d.varlen_q ? args.q.size(0) : d.batch * d.q_len;
  std::vector<float> own;
  float* ws = args.workspace.defined() ? args.workspace.data_as<float>() : nullptr;
  if (!ws) {
    own.resize(std::size_t(paged_workspace_elems(splits, rows, hq, dv)));
    ws = own.data();
  }
  float* ws_lse = ws + splits * rows * hq * dv;

  // Stage 1: partial states, scattered from the task's rows (group head-major) to the
  // workspace's [split, row, head] order.
  parallel_for(d.batch * d.heads_kv * splits, [&](std::int64_t task) {
    const std::int64_t split = task % splits, hk = task / splits % d.heads_kv;
    const std::int64_t b = task / splits / d.heads_kv;
    const paged::SeqQueries& s = seqs[std::size_t(b)];
    std::int64_t k0, k1;
    split_keys(s, d, split, k0, k1);
    const std::int64_t n = d.group() * s.len_q;
    std::vector<float> o(std::size_t(n * dv)), lse(static_cast<std::size_t>(n));
    paged::attend_keys(args, d, s, b, hk, k0, k1, o.data(), lse.data());
    const std::int64_t row0 = split * rows + first_row(s, b, d);
    for (std::int64_t g = 0; g < d.group(); ++g) {
      const std::int64_t h = hk * d.group() + g;
      for (std::int64_t i = 0; i < s.len_q; ++i) {
        const std::int64_t r = g * s.len_q + i, slot = (row0 + i) * hq + h;
        std::copy(o.data() + r * dv, o.data() + (r + 1) * dv, ws + slot * dv);
        ws_lse[slot] = lse[std::size_t(r)];
      }
    }
  });

  // Stage 2: merge_states of each sequence's [splits, len_q, heads_q] states into its rows of
  // out and lse (views with the outputs' strides).
  const auto lo = core::token_layout(args.out, d.varlen_q);
  const bool want_lse = args.lse.defined();
  const auto ll = want_lse ? core::lse_layout(args.lse, d.varlen_q) : core::TokenLayout{};
  const std::int64_t out_elem = std::int64_t(dtype_size(args.out.dtype()));
  parallel_for(d.batch, [&](std::int64_t b) {
    const paged::SeqQueries& s = seqs[std::size_t(b)];
    if (s.len_q == 0) return;
    const std::int64_t row0 = first_row(s, b, d);
    MergeArgs m;
    m.states_o = Tensor(ws + row0 * hq * dv, DType::f32, {splits, s.len_q, hq, dv},
                        {rows * hq * dv, hq * dv, dv, 1});
    m.states_lse =
        Tensor(ws_lse + row0 * hq, DType::f32, {splits, s.len_q, hq}, {rows * hq, hq, 1});
    char* out = static_cast<char*>(args.out.data()) +
                core::element_offset(lo, b, s.q_start, 0, 0) * out_elem;
    m.out = Tensor(out, args.out.dtype(), {s.len_q, hq, dv}, {lo.token_stride, lo.head_stride, 1});
    if (want_lse) {
      m.out_lse = Tensor(args.lse.data_as<float>() + core::element_offset(ll, b, s.q_start, 0, 0),
                         DType::f32, {s.len_q, hq}, {ll.token_stride, ll.head_stride});
    }
    merge(m, core::MergeDims{splits, s.len_q, hq, dv});
  });
}

}  // namespace

void paged_fast(const PagedAttentionArgs& args, const core::PagedDims& dims) {
  const auto seqs = paged::sequence_queries(args, dims);
  if (dims.num_splits <= 1) return run_unsplit(args, dims, seqs);
  run_split(args, dims, seqs);
}

}  // namespace flashkit::cpu
