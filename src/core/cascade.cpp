// Cascade attention by composition: the shared prefix and each request's suffix write partial
// (o, lse) states into the caller's workspace, and merge_states combines them.
//
// The shared level runs all batch * q_len queries as ONE sequence (q viewed as [1, batch * q_len,
// ...]) against the shared pages, so they are read once per KV head rather than once per request.
//  - CPU: paged_attention wants a sequence to hold its queries (they are taken to be its last
//    tokens; with causal off nothing else depends on it), so, the prefix length being known, the
//    rows go in chunks of at most prefix-length queries, each a valid call; an empty prefix skips
//    the level. States: [shared, suffix].
//  - CUDA: the forward over paged K/V (cuda/paged_fwd.hpp: the sm90 kernel on compute
//    capability 9.0, the sm80 one elsewhere) on tensor cores: the level is
//    batch * q_len * group query rows per KV head against the whole prefix, ~4.3 GFLOP at batch
//    64 and 4k tokens, which the decode kernels' CUDA cores would take longer over than plain
//    decode takes to read every request's copy. Its few query tiles are spread over enough CTAs
//    by splitting the prefix's keys, each split its own state: [split 0 .. split S-1, suffix].
//    seq_lens stays on the device (no host sync, graph-capturable): splits past the prefix's end
//    see no key and weigh 0 in the merge. Calls the tensor-core path cannot run (e4m3 pages, other
//    head dims) take one decode-kernel call for the level instead.
// The suffix level is one paged_attention call (decode kernels on CUDA). Every level's lse is
// [heads, batch * q_len] (the shared level's layout as one sequence), so the states stack as
// merge_states' [states, ...] with one stride.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "core/checks.hpp"
#include "core/validate.hpp"
#include "flashkit/cascade.hpp"
#include "flashkit/error.hpp"

#if FLASHKIT_HAVE_CUDA
#include "cuda/common/device.hpp"
#include "cuda/decode/decode_backend.hpp"
#include "cuda/paged_fwd.hpp"
#include "cuda/stream_wait.hpp"
#endif

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

// Query rows per tile of the paged forward (128; the sm80 kernel's 64 at d = 256 on sm90 devices
// without the sm90 kernel, where this counts half the CTAs) and the CTAs the sm80 kernel's key
// splits aim for (shared_split: the sm90 kernel's fill the SMs once), counted without GQA
// packing: 4 per SM of the H200's 132, so ~2 per SM once a GQA group of 4 is packed into each
// tile. The forward's CTA holds half an SM's registers, so two run at once; with one per SM (8
// splits of 512 keys at batch 64 and a 4k prefix, 128 CTAs) the level ran at ~135 TFLOP/s
// (docs/kernels/cascade.md). A fixed number, not read from the device, so that
// cascade_workspace_elems is a function of the shapes alone.
constexpr std::int64_t kTileRows = 128;
constexpr std::int64_t kTargetCtas = 4 * 132;
constexpr std::int64_t kMaxSharedSplits = 16;
// A split of fewer keys costs more (its Q load, epilogue and partial state) than it adds.
constexpr std::int64_t kMinSplitKeys = 256;
constexpr std::int64_t kSplitKeyMultiple = 64;       // the sm80 forward's KV block (d <= 256)
constexpr std::int64_t kSm90SplitKeyMultiple = 128;  // the sm90 one's (d <= 128)
// The longest splits the sm90 shared level takes to leave half of the SMs to a side stream.
constexpr std::int64_t kSm90SideStreamSplitKeys = 1024;

std::int64_t div_up(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

// Key splits the workspace has room for: enough for kTargetCtas CTAs of (query tile, head).
std::int64_t max_shared_splits(std::int64_t rows, std::int64_t heads) {
  const std::int64_t ctas = div_up(rows, kTileRows) * heads;
  if (ctas <= 0) return 1;
  return std::clamp<std::int64_t>(div_up(kTargetCtas, ctas), 1, kMaxSharedSplits);
}

// The f32 workspace: partial outputs of every state [states, batch * q_len, heads, d], then their
// lse [states, heads, batch * q_len] (the shared level's layout as one sequence).
struct Workspace {
  float* base;
  Dims d;

  std::int64_t rows() const { return d.batch * d.q_len; }
  std::int64_t states() const { return 1 + max_shared_splits(rows(), d.heads); }
  std::int64_t o_elems() const { return rows() * d.heads * d.head_dim; }
  std::int64_t lse_elems() const { return d.heads * rows(); }
  float* o(std::int64_t state) const { return base + state * o_elems(); }
  float* lse(std::int64_t state) const { return base + states() * o_elems() + state * lse_elems(); }
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
  if (m.diagonal_offset != 0) fail("mask.diagonal_offset", "0" + why, num(m.diagonal_offset));
}

void check_shared_sequence(const PagedKV& shared, const Device& device) {
  expect_tensor("shared.block_table", shared.block_table, 2, device);
  expect_size("shared.block_table", shared.block_table, 0, 1, "one shared sequence");
  expect_tensor("shared.seq_lens", shared.seq_lens, 1, device);
  expect_size("shared.seq_lens", shared.seq_lens, 0, 1, "one shared sequence");
  core::expect_dtype_in("shared.seq_lens", shared.seq_lens, {DType::i32});
}

// The workspace and the merge hold states of q's head dim: values must have it too.
void check_value_head_dims(const CascadeAttentionArgs& a, const Dims& d) {
  for (const auto& [name, pages] : {std::pair{"shared.v_pages", &a.shared.v_pages},
                                    std::pair{"suffix.v_pages", &a.suffix.v_pages}}) {
    if (pages->rank() == 4 && pages->size(3) != d.head_dim) {
      fail(std::string(name) + ".shape[3]",
           num(d.head_dim) + " (the head dim of q; cascade needs d_v = d)", num(pages->size(3)));
    }
  }
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
  if (!d.device.is_cpu() && reinterpret_cast<std::uintptr_t>(w.data()) % 16 != 0) {
    fail("workspace.data", "a 16-byte aligned pointer on cuda (the kernels store 16-byte rows)",
         "an address = " + num(std::int64_t(reinterpret_cast<std::uintptr_t>(w.data()) % 16)) +
             " mod 16");
  }
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
core::PagedDims validate_level(const PagedAttentionArgs& p, const std::string& level) {
  try {
    return core::validate_paged(p, 1);
  } catch (const Error& e) {
    if (e.argument().rfind("kv.", 0) != 0) throw;
    core::rethrow_as(e, level + e.argument().substr(2));
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

// The suffix level writing state `state` of the workspace.
PagedAttentionArgs suffix_into(const CascadeAttentionArgs& a, const Workspace& ws,
                               std::int64_t state) {
  const Dims& d = ws.d;
  const Tensor out(ws.o(state), DType::f32, {d.batch, d.q_len, d.heads, d.head_dim}, d.device);
  const Tensor lse(ws.lse(state), DType::f32, {d.batch, d.heads, d.q_len}, {d.q_len, ws.rows(), 1},
                   d.device);
  return level_args(a, a.q, a.suffix, a.mask, out, lse);
}

// The calls of both levels, validated before any runs.
struct Levels {
  std::vector<PagedAttentionArgs> shared;  // empty when the prefix is known to be empty
  PagedAttentionArgs suffix;
};

Levels plan_levels(const CascadeAttentionArgs& a, const Workspace& ws) {
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
    l.suffix = suffix_into(a, ws, 1);
  }
  validate_level(l.suffix, "suffix");
  return l;
}

// merge_states rows are (tokens, heads) with one stride each. out is [batch, q_len, heads] and
// lse [batch, heads, q_len]: only within one request do both index as one grid (tokens =
// heads_q, heads = q_len), so the general case merges request by request.
void merge_request(const CascadeAttentionArgs& a, const Workspace& ws, std::int64_t states,
                   std::int64_t b) {
  const Dims& d = ws.d;
  MergeArgs m;
  m.states_o = Tensor(ws.o(0) + b * d.q_len * d.heads * d.head_dim, DType::f32,
                      {states, d.heads, d.q_len, d.head_dim},
                      {ws.o_elems(), d.head_dim, d.heads * d.head_dim, 1}, d.device);
  m.states_lse = Tensor(ws.lse(0) + b * d.q_len, DType::f32, {states, d.heads, d.q_len},
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
void merge_decode(const CascadeAttentionArgs& a, const Workspace& ws, std::int64_t states) {
  const Dims& d = ws.d;
  MergeArgs m;
  m.states_o = Tensor(ws.o(0), DType::f32, {states, d.batch, d.heads, d.head_dim},
                      {ws.o_elems(), d.heads * d.head_dim, d.head_dim, 1}, d.device);
  m.states_lse = Tensor(ws.lse(0), DType::f32, {states, d.batch, d.heads},
                        {ws.lse_elems(), 1, d.batch}, d.device);
  m.out = Tensor(a.out.data(), a.out.dtype(), {d.batch, d.heads, d.head_dim},
                 {a.out.stride(0), a.out.stride(2), a.out.stride(3)}, d.device);
  if (a.lse.defined()) {
    m.out_lse = Tensor(a.lse.data(), DType::f32, {d.batch, d.heads},
                       {a.lse.stride(0), a.lse.stride(1)}, d.device);
  }
  m.stream = a.stream;
  merge_states(m);
}

void merge(const CascadeAttentionArgs& a, const Workspace& ws, std::int64_t states) {
  if (ws.d.q_len == 1) return merge_decode(a, ws, states);
  for (std::int64_t b = 0; b < ws.d.batch; ++b) merge_request(a, ws, states, b);
}

#if FLASHKIT_HAVE_CUDA
// FLASHKIT_CASCADE_SPLITS=N (benchmarks): at most N key splits for the shared level instead of
// the kernel's own choice below, never more than the workspace holds; 0 when unset.
std::int64_t split_cap() {
  const char* env = std::getenv("FLASHKIT_CASCADE_SPLITS");
  if (env == nullptr) return 0;
  char* end = nullptr;
  const long n = std::strtol(env, &end, 10);
  if (end == env || *end != '\0' || n < 1) {
    fail("FLASHKIT_CASCADE_SPLITS", "a positive integer (or unset)", std::string("'") + env + "'");
  }
  return n;
}

// The prefix's keys in equal splits (multiples of the kernel's KV block), as many as the
// workspace holds and the block table's capacity fills with kMinSplitKeys each. The capacity
// stands for the prefix length, which stays on the device. The sm90 kernel's CTA holds a whole
// SM (all its registers), so there the splits fill the SMs once (H200, batch 64, a 4k prefix, 8
// KV heads: 2 packed tiles x 8 heads x 8 splits of 512 keys = 128 CTAs, 69.9 us for the step
// against 80.8 with 16 of 256 keys on the sm80 kernel); half of them where the splits stay
// short, so that the suffix level runs beside the shared level on a second stream (4 splits of
// 1024 keys: 66.3 us; with 4096-key splits the shared level's own time grew by more than the
// overlap saved: 131 against 107 us at a 16k prefix; docs/kernels/cascade.md, v4).
cuda::PagedFwdOptions shared_split(const PagedAttentionArgs& shared, const Workspace& ws,
                                   const core::PagedDims& d) {
  cuda::PagedFwdOptions split;
  split.out_stride = ws.o_elems();
  split.lse_stride = ws.lse_elems();
  split.pack_gqa = d.group() > 1;  // the level is non-causal: rows need no positions
  const std::int64_t capacity = d.max_pages * d.page_size;
  std::int64_t most = max_shared_splits(ws.rows(), ws.d.heads);
  std::int64_t multiple = kSplitKeyMultiple;
  if (cuda::paged_fwd_kernel(shared, d, split) == cuda::PagedFwdKernel::sm90) {
    const std::int64_t pack = split.pack_gqa ? d.group() : 1;
    const std::int64_t ctas = div_up(ws.rows() * pack, kTileRows) * (d.heads_q / pack);
    const std::int64_t sms = cuda::multiprocessor_count(shared.q.device());
    const std::int64_t half = std::max<std::int64_t>(1, sms / 2 / ctas);
    most = std::clamp<std::int64_t>(
        div_up(capacity, half) <= kSm90SideStreamSplitKeys ? half : sms / ctas, 1, most);
    multiple = kSm90SplitKeyMultiple;
  }
  if (split_cap() > 0) most = std::min(max_shared_splits(ws.rows(), ws.d.heads), split_cap());
  const std::int64_t keys =
      std::max(kMinSplitKeys, div_up(div_up(capacity, most), multiple) * multiple);
  split.key_splits = int(std::clamp<std::int64_t>(div_up(capacity, keys), 1, most));
  split.split_keys = int(keys);
  return split;
}

// CTAs of the shared level on tensor cores: query tiles (GQA groups packed) x kernel heads x key
// splits. With at most half as many as the GPU has SMs, the suffix level runs beside it on a
// side stream (cascade.hpp): at batch 64, prefix 1k (64 CTAs) 60.6 instead of 76.1 us on the
// H200. Where the shared level fills the SMs (2 CTAs per SM at 255 registers), the suffix level's
// CTAs find no room until it ends, and forking cost 9 % (docs/kernels/cascade.md, v3).
std::int64_t shared_ctas(const Workspace& ws, const core::PagedDims& d,
                         const cuda::PagedFwdOptions& split) {
  const std::int64_t pack = split.pack_gqa ? d.group() : 1;
  return div_up(ws.rows() * pack, kTileRows) * (d.heads_q / pack) * split.key_splits;
}

// Both levels on the GPU, nothing read back: the shared level's key splits on tensor cores
// (or one decode-kernel call), then the suffix level. Where the shared level leaves half of the
// SMs idle, the suffix level runs beside it on a second stream and writes a state of its own,
// and one merge follows; otherwise decode merges the shared level's states in the suffix level's
// own epilogue (cuda::PriorStates: no merge kernel, and the suffix's state never goes through
// the workspace), and several queries a request take the merge. Every level is validated first.
void run_on_device(const CascadeAttentionArgs& a, const Workspace& ws) {
  const Dims& d = ws.d;
  PagedAttentionArgs shared = shared_rows(a, ws, 0, ws.rows());
  shared.num_splits = 1;  // the decode kernels' own split would need a workspace of its own
  const core::PagedDims shared_dims = validate_level(shared, "shared");
  // The suffix level runs beside a shared level that leaves half of the SMs idle: on the
  // caller's side stream, or, on sm90 (where it starts once the shared level's CTAs have), on a
  // stream of the library's own (cuda::helper_stream).
  const bool user_side = a.side_stream != nullptr && a.side_stream != a.stream;
  cuda::PagedFwdOptions split = shared_split(shared, ws, shared_dims);
  const bool tensor_cores = (a.algo == Algo::automatic || a.algo == Algo::fa2) &&
                            cuda::paged_fwd_unsupported(shared, shared_dims, split).empty();
  if (!tensor_cores) split.key_splits = 1;
  const bool sm90 = tensor_cores && cuda::paged_fwd_kernel(shared, shared_dims, split) ==
                                        cuda::PagedFwdKernel::sm90;
  const bool fork =
      (user_side || sm90) && tensor_cores &&
      2 * shared_ctas(ws, shared_dims, split) <= cuda::multiprocessor_count(a.q.device());
  void* const side = !fork ? nullptr : user_side ? a.side_stream : cuda::helper_stream();
  // The decode kernels' fold instances take it (f16 / bf16 pages, 2-4 warps a CTA); a suffix
  // level that paged_attention would send to the tensor-core forward (paged_fwd_preferred: over
  // 48 query rows a KV head on sm90, 128 on sm80), or to another decode kernel, keeps the merge.
  PagedAttentionArgs suffix = level_args(a, a.q, a.suffix, a.mask, a.out, a.lse);
  suffix.num_splits = 1;
  core::PagedDims suffix_dims = validate_level(suffix, "suffix");
  const bool fold = !fork && d.q_len == 1 && !cuda::paged_fwd_preferred(suffix, suffix_dims) &&
                    cuda::paged_attention_folds(suffix, suffix_dims);
  if (!fold) {
    suffix = suffix_into(a, ws, split.key_splits);
    suffix.num_splits = 1;
    suffix_dims = validate_level(suffix, "suffix");  // its out and lse are the workspace's
  }
  if (ws.rows() == 0) return;

  if (fork) {
    // The suffix level starts once every CTA of the shared level has (its inputs are on
    // `stream`, queued before): were the two free to start in either order, the suffix level's
    // 4-per-SM CTAs, started first, would fill every SM, and the shared level's one-per-SM CTAs
    // would wait for them to drain (H100, batch 64 / 4k / 256: the shared level started ~24 us
    // into the step in most replays; docs/kernels/cascade.md, v21).
    split.started = cuda::started_event();
    suffix.stream = side;
  }
  if (tensor_cores) {
    cuda::paged_fwd(shared, shared_dims, split);
    if (fork) cuda::stream_wait_started(side);
  } else {
    paged_attention(shared);
  }
  if (fold) {
    cuda::PriorStates priors;
    priors.o = ws.o(0);
    priors.lse = ws.lse(0);
    priors.states = int(split.key_splits);
    priors.o_state = ws.o_elems();
    priors.o_row = d.heads * d.head_dim;
    priors.o_head = d.head_dim;
    priors.lse_state = ws.lse_elems();
    priors.lse_row = 1;
    priors.lse_head = ws.rows();
    return cuda::paged_attention(suffix, suffix_dims, priors);
  }
  paged_attention(suffix);
  if (fork) cuda::stream_wait(a.stream, side);
  merge(a, ws, split.key_splits + 1);
}
#else
[[noreturn]] void run_on_device(const CascadeAttentionArgs& a, const Workspace&) {
  fail("q.device", "cpu (this build has no CUDA backend)", a.q.device().str());
}
#endif

}  // namespace

std::int64_t cascade_workspace_elems(std::int64_t batch, std::int64_t q_len, std::int64_t heads_q,
                                     std::int64_t head_dim_v) {
  const std::int64_t rows = batch * q_len;
  return (1 + max_shared_splits(rows, heads_q)) * rows * heads_q * (head_dim_v + 1);
}

void cascade_attention(const CascadeAttentionArgs& a) {
  check_mask(a.mask);
  expect_tensor("q", a.q, 4, a.q.device());
  const Dims d{a.q.size(0), a.q.size(1), a.q.size(2), a.q.size(3), a.q.device()};
  check_shared_sequence(a.shared, d.device);
  check_value_head_dims(a, d);
  check_workspace(a.workspace, d);
  check_outputs(a, d);
  check_q_rows(a.q, d);
  const Workspace ws{a.workspace.data_as<float>(), d};
  if (!d.device.is_cpu()) return run_on_device(a, ws);
  const Levels levels = plan_levels(a, ws);

  if (levels.shared.empty()) return paged_attention(levels.suffix);
  for (const PagedAttentionArgs& rows : levels.shared) paged_attention(rows);
  paged_attention(levels.suffix);
  merge(a, ws, 2);
}

}  // namespace flashkit
