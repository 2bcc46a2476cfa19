// Cascade attention by composition: two paged_attention calls (the shared prefix, each request's
// suffix) write partial (o, lse) states into the caller's workspace, and merge_states combines
// them. No kernel of its own, so it runs wherever paged_attention and merge_states do.
//
// Level 1 runs all batch * q_len queries as ONE sequence (q viewed as [1, batch * q_len, ...])
// against the shared pages, so they are read once per KV head rather than once per request.
// paged_attention wants a sequence to hold its queries (they are taken to be its last tokens;
// with causal off nothing else depends on it), so on the CPU, where the prefix length is known,
// the rows go in chunks of at most prefix-length queries, each a valid call; an empty prefix skips
// level 1. A GPU-resident seq_lens is not read: one call, which the kernels run as it stands
// (with causal off they only walk the keys that exist; none gives lse = -inf).
// Level 1's lse is [heads, batch * q_len]; level 2's is laid out the same in the workspace, so the
// two states stack as merge_states' [2, ...] with one stride.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/checks.hpp"
#include "core/validate.hpp"
#include "flashkit/cascade.hpp"
#include "flashkit/error.hpp"

namespace flashkit {

namespace {

using core::expect_size;
using core::expect_tensor;
using core::fail;
using core::num;

struct Dims {
  std::int64_t batch, q_len, heads, head_dim;
  Device device;
};

// The f32 workspace: partial outputs of both levels [2, batch * q_len, heads, d], then their lse
// [2, heads, batch * q_len] (level 1's layout as one sequence).
struct Workspace {
  float* base;
  Dims d;

  std::int64_t rows() const { return d.batch * d.q_len; }
  std::int64_t o_elems() const { return rows() * d.heads * d.head_dim; }
  std::int64_t lse_elems() const { return d.heads * rows(); }
  float* o(int level) const { return base + level * o_elems(); }
  float* lse(int level) const { return base + 2 * o_elems() + level * lse_elems(); }
};

void* shifted(const Tensor& t, std::int64_t elems) {
  return static_cast<char*>(t.data()) + elems * std::int64_t(dtype_size(t.dtype()));
}

// Key positions are per level (the suffix's count from its own start), so a window or ALiBi
// distance, or a prefix-LM boundary, would be measured from the wrong place.
void check_mask(const Mask& m) {
  const std::string why = " (key positions across the cascade's two levels are not modelled)";
  if (m.window_left != -1) fail("mask.window_left", "-1" + why, num(m.window_left));
  if (m.window_right != -1) fail("mask.window_right", "-1" + why, num(m.window_right));
  if (m.alibi_slopes.defined()) {
    fail("mask.alibi_slopes", "none" + why, "a tensor " + m.alibi_slopes.shape_str());
  }
  if (m.prefix_len != 0) fail("mask.prefix_len", "0" + why, num(m.prefix_len));
}

void check_shared_sequence(const PagedKV& shared, const Device& device) {
  expect_tensor("shared.block_table", shared.block_table, 2, device);
  expect_size("shared.block_table", shared.block_table, 0, 1, "one shared sequence");
  expect_tensor("shared.seq_lens", shared.seq_lens, 1, device);
  expect_size("shared.seq_lens", shared.seq_lens, 0, 1, "one shared sequence");
  core::expect_dtype_in("shared.seq_lens", shared.seq_lens, {DType::i32});
}

void check_workspace(const Tensor& w, const Dims& d) {
  core::expect_defined("workspace", w);
  core::expect_device("workspace", w, d.device);
  core::expect_dtype_in("workspace", w, {DType::f32});
  if (!w.is_contiguous()) fail("workspace", "a contiguous tensor", "a strided view");
  const std::int64_t need = cascade_workspace_elems(d.batch, d.q_len, d.heads, d.head_dim);
  if (w.numel() < need) {
    fail("workspace", ">= " + num(need) + " f32 elements (cascade_workspace_elems)",
         num(w.numel()));
  }
  core::expect_data("workspace", w);
}

void check_outputs(const CascadeAttentionArgs& a, const Dims& d) {
  expect_tensor("out", a.out, 4, d.device);
  core::expect_dtype_in("out", a.out, {DType::f64, DType::f32, DType::f16, DType::bf16});
  for (int i = 0; i < 4; ++i) expect_size("out", a.out, i, a.q.size(i), "as in q");
  if (!a.lse.defined()) return;
  expect_tensor("lse", a.lse, 3, d.device);
  core::expect_dtype_in("lse", a.lse, {DType::f32});
  expect_size("lse", a.lse, 0, d.batch, "batch");
  expect_size("lse", a.lse, 1, d.heads, "heads_q");
  expect_size("lse", a.lse, 2, d.q_len, "q_len");
}

// Level 1 views q as one sequence of batch * q_len tokens: one stride over batch and tokens.
std::int64_t q_row_stride(const Tensor& q) {
  return q.size(1) == 1 ? q.stride(0) : q.stride(1);
}

void check_q_rows(const Tensor& q, const Dims& d) {
  if (d.batch > 1 && d.q_len > 1 && q.stride(0) != d.q_len * q.stride(1)) {
    fail("q.stride[0]",
         num(d.q_len * q.stride(1)) +
             " = q_len * q.stride[1] (the shared level reads q as one sequence of batch * q_len "
             "tokens)",
         num(q.stride(0)));
  }
}

PagedAttentionArgs level_args(const CascadeAttentionArgs& a, const Tensor& q, const PagedKV& kv,
                              const Mask& mask, const Tensor& out, const Tensor& lse) {
  PagedAttentionArgs p;
  p.q = q;
  p.kv = kv;
  p.out = out;
  p.lse = lse;
  p.softmax_scale = a.softmax_scale;
  p.mask = mask;
  p.num_splits = 0;  // the plan's choice; the CPU allocates its own split scratch
  p.algo = a.algo;
  p.stream = a.stream;
  return p;
}

// paged_attention calls its cache "kv"; say which level's cache is wrong.
void validate_level(const PagedAttentionArgs& p, const std::string& level) {
  try {
    core::validate_paged(p, 1);
  } catch (const Error& e) {
    const std::string& arg = e.argument();
    const std::string what = e.what();  // "<arg>: expected <expected>, got <got>"
    const std::size_t expected = arg.size() + std::strlen(": expected ");
    const std::size_t got = what.rfind(", got ");
    if (arg.rfind("kv.", 0) != 0 || got == std::string::npos || got < expected) throw;
    throw Error(level + arg.substr(2), what.substr(expected, got - expected), what.substr(got + 6));
  }
}

// Query rows [begin, begin + n) of the flattened batch as one sequence against the prefix.
PagedAttentionArgs shared_rows(const CascadeAttentionArgs& a, const Workspace& ws,
                               std::int64_t begin, std::int64_t n) {
  const Dims& d = ws.d;
  const Tensor& q = a.q;
  const std::int64_t row = q_row_stride(q);
  const Tensor rows(shifted(q, begin * row), q.dtype(), {1, n, d.heads, d.head_dim},
                    {n * row, row, q.stride(2), q.stride(3)}, d.device);
  const Tensor out(ws.o(0) + begin * d.heads * d.head_dim, DType::f32, {1, n, d.heads, d.head_dim},
                   d.device);
  const Tensor lse(ws.lse(0) + begin, DType::f32, {1, d.heads, n}, {ws.lse_elems(), ws.rows(), 1},
                   d.device);
  Mask mask = a.mask;
  mask.causal = false;  // every query sees the whole prefix
  return level_args(a, rows, a.shared, mask, out, lse);
}

// The calls of both levels, validated before any runs.
struct Levels {
  std::vector<PagedAttentionArgs> shared;  // empty when the prefix is known to be empty
  PagedAttentionArgs suffix;
};

Levels plan_levels(const CascadeAttentionArgs& a, const Workspace& ws) {
  const Dims& d = ws.d;
  const std::int64_t rows = ws.rows();
  const std::int64_t prefix = a.shared.seq_lens.data_as<const std::int32_t>()[0];
  Levels l;
  if (prefix == 0) {
    // Level 2 alone is the answer and writes the caller's outputs; level 1's cache is still
    // checked, as a call with no queries.
    validate_level(shared_rows(a, ws, 0, 0), "shared");
    l.suffix = level_args(a, a.q, a.suffix, a.mask, a.out, a.lse);
  } else {
    // A negative length goes as one call, for validation to refuse.
    const std::int64_t chunk =
        std::max<std::int64_t>(1, prefix > 0 ? std::min(prefix, rows) : rows);
    std::int64_t r = 0;
    do {
      l.shared.push_back(shared_rows(a, ws, r, std::min(chunk, rows - r)));
      validate_level(l.shared.back(), "shared");
      r += chunk;
    } while (r < rows);
    const Tensor out(ws.o(1), DType::f32, {d.batch, d.q_len, d.heads, d.head_dim}, d.device);
    const Tensor lse(ws.lse(1), DType::f32, {d.batch, d.heads, d.q_len}, {d.q_len, rows, 1},
                     d.device);
    l.suffix = level_args(a, a.q, a.suffix, a.mask, out, lse);
  }
  validate_level(l.suffix, "suffix");
  return l;
}

// merge_states rows are (tokens, heads) with one stride each. out is [batch, q_len, heads] and
// lse [batch, heads, q_len]: only within one request do both index as one grid (tokens =
// heads_q, heads = q_len), so the general case merges request by request.
void merge_request(const CascadeAttentionArgs& a, const Workspace& ws, std::int64_t b) {
  const Dims& d = ws.d;
  MergeArgs m;
  m.states_o = Tensor(ws.o(0) + b * d.q_len * d.heads * d.head_dim, DType::f32,
                      {2, d.heads, d.q_len, d.head_dim},
                      {ws.o_elems(), d.head_dim, d.heads * d.head_dim, 1}, d.device);
  m.states_lse = Tensor(ws.lse(0) + b * d.q_len, DType::f32, {2, d.heads, d.q_len},
                        {ws.lse_elems(), ws.rows(), 1}, d.device);
  m.out = Tensor(shifted(a.out, b * a.out.stride(0)), a.out.dtype(), {d.heads, d.q_len, d.head_dim},
                 {a.out.stride(2), a.out.stride(1), a.out.stride(3)}, d.device);
  if (a.lse.defined()) {
    m.out_lse = Tensor(shifted(a.lse, b * a.lse.stride(0)), DType::f32, {d.heads, d.q_len},
                       {a.lse.stride(1), a.lse.stride(2)}, d.device);
  }
  m.stream = a.stream;
  merge_states(m);
}

// Decode (q_len == 1): both layouts are [batch, heads], so one call merges the whole batch.
void merge_decode(const CascadeAttentionArgs& a, const Workspace& ws) {
  const Dims& d = ws.d;
  MergeArgs m;
  m.states_o = Tensor(ws.o(0), DType::f32, {2, d.batch, d.heads, d.head_dim},
                      {ws.o_elems(), d.heads * d.head_dim, d.head_dim, 1}, d.device);
  m.states_lse =
      Tensor(ws.lse(0), DType::f32, {2, d.batch, d.heads}, {ws.lse_elems(), 1, d.batch}, d.device);
  m.out = Tensor(a.out.data(), a.out.dtype(), {d.batch, d.heads, d.head_dim},
                 {a.out.stride(0), a.out.stride(2), a.out.stride(3)}, d.device);
  if (a.lse.defined()) {
    m.out_lse = Tensor(a.lse.data(), DType::f32, {d.batch, d.heads},
                       {a.lse.stride(0), a.lse.stride(1)}, d.device);
  }
  m.stream = a.stream;
  merge_states(m);
}

}  // namespace

std::int64_t cascade_workspace_elems(std::int64_t batch, std::int64_t q_len, std::int64_t heads_q,
                                     std::int64_t head_dim_v) {
  return 2 * batch * q_len * heads_q * (head_dim_v + 1);
}

void cascade_attention(const CascadeAttentionArgs& a) {
  check_mask(a.mask);
  expect_tensor("q", a.q, 4, a.q.device());
  // Both levels are library calls that run on CUDA too, but the composition (level 1's query
  // chunks need the prefix length, which device memory hides) has not been run on a GPU yet.
  if (!a.q.device().is_cpu()) {
    fail("q.device", "cpu (cascade attention on CUDA tensors is not verified yet)",
         a.q.device().str());
  }
  const Dims d{a.q.size(0), a.q.size(1), a.q.size(2), a.q.size(3), a.q.device()};
  check_shared_sequence(a.shared, d.device);
  check_workspace(a.workspace, d);
  check_outputs(a, d);
  check_q_rows(a.q, d);
  const Workspace ws{a.workspace.data_as<float>(), d};
  const Levels levels = plan_levels(a, ws);

  if (levels.shared.empty()) return paged_attention(levels.suffix);
  for (const PagedAttentionArgs& rows : levels.shared) paged_attention(rows);
  paged_attention(levels.suffix);
  if (d.q_len == 1) return merge_decode(a, ws);
  for (std::int64_t b = 0; b < d.batch; ++b) merge_request(a, ws, b);
}

}  // namespace flashkit
