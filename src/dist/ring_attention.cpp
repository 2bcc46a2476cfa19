// Ring attention on the CPU backend: each step runs attention_forward / attention_backward on
// chunk pairs of this rank's queries and the K/V shard it holds (the global mask moved to the
// pair by Mask::diagonal_offset), merges or adds the results, and shifts the shard (and,
// backward, its gradient accumulators) one rank along the ring.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/checks.hpp"
#include "core/validate.hpp"
#include "dist/ring_plan.hpp"
#include "flashkit/error.hpp"
#include "flashkit/ring.hpp"

namespace flashkit {

namespace {

using core::fail;
using core::num;
using dist::Chunk;
using dist::lse_columns;
using dist::rows_of;

// A contiguous CPU buffer (8-byte aligned storage) and its view.
class Buffer {
 public:
  Buffer(DType dtype, std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d = -1)
      : storage_(words(dtype, a * b * c * std::max<std::int64_t>(d, 1)), 0),
        view_(d < 0 ? Tensor(storage_.data(), dtype, {a, b, c})
                    : Tensor(storage_.data(), dtype, {a, b, c, d})) {}
  Buffer(const Buffer&) = delete;  // the view points into storage_
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&&) = default;  // moving the vector keeps its heap block, so the view stays valid
  Buffer& operator=(Buffer&&) = default;

  const Tensor& view() const { return view_; }
  void fill(float value) {
    auto* x = view_.data_as<float>();
    std::fill(x, x + view_.numel(), value);
  }

 private:
  static std::size_t words(DType dtype, std::int64_t elems) {
    return std::size_t((elems * std::int64_t(dtype_size(dtype)) + 7) / 8);
  }
  std::vector<std::uint64_t> storage_;
  Tensor view_;
};

struct Shard {
  std::int64_t batch, len, heads_q, heads_kv, dim, dim_v;
};

// The shard as one attention problem, so its shapes and dtypes are checked as usual.
AttentionProblem shard_problem(const RingProblem& p) {
  AttentionProblem whole;
  whole.q = p.q;
  whole.k = p.k;
  whole.v = p.v;
  whole.softmax_scale = p.softmax_scale;
  whole.mask = p.mask;
  return whole;
}

// What the ring adds to the shard's own checks, none of which needs another rank.
Shard check_local(const RingProblem& p, const Tensor& lse) {
  core::expect_cpu_only("q", p.q.device(), "ring attention");
  if (!lse.defined()) fail("lse", "a tensor (the backward reads it)", "none");
  if (p.mask.diagonal_offset != 0) {
    fail("mask.diagonal_offset", "0 (ring positions are global; each chunk pair sets its own)",
         num(p.mask.diagonal_offset));
  }
  const Shard s{p.q.size(0), p.q.size(1), p.q.size(2), p.k.size(2), p.q.size(3), p.v.size(3)};
  core::expect_size("k", p.k, 1, s.len, "q's local length (every rank holds L queries and L keys)");
  if (p.layout == RingLayout::zigzag && s.len % 2 != 0) {
    fail("q.shape[1]", "an even local length for the zigzag layout (two chunks of L / 2)",
         num(s.len));
  }
  return s;
}

// The K/V shard a rank holds at a step (and, backward, its f32 gradient accumulators), with the
// buffers the next step's shard arrives in.
class HeldShard {
 public:
  HeldShard(const RingProblem& p, const Shard& s, bool with_gradients) {
    for (int i = 0; i < (with_gradients ? 4 : 2); ++i) {
      const DType dtype = i == 0 ? p.k.dtype() : i == 1 ? p.v.dtype() : DType::f32;
      const std::int64_t dim = i % 2 == 0 ? s.dim : s.dim_v;
      held_.emplace_back(dtype, s.batch, s.len, s.heads_kv, dim);
      next_.emplace_back(dtype, s.batch, s.len, s.heads_kv, dim);
    }
    dist::copy_into(held_[0].view(), p.k);
    dist::copy_into(held_[1].view(), p.v);
  }
  const Tensor& k() const { return held_[0].view(); }
  const Tensor& v() const { return held_[1].view(); }
  const Tensor& dk() const { return held_[2].view(); }
  const Tensor& dv() const { return held_[3].view(); }
  // Passes what this rank holds to the next rank and takes the previous rank's; with
  // `gradients_only`, the accumulators alone.
  void shift(RingCommunicator& comm, bool gradients_only) {
    for (std::size_t i = gradients_only ? 2 : 0; i < held_.size(); ++i) {
      comm.shift(held_[i].view(), next_[i].view());
      std::swap(held_[i], next_[i]);
    }
  }

 private:
  std::vector<Buffer> held_, next_;  // k, v, then dk, dv
};

// The global mask as seen by one chunk pair: query t of chunk q is global token q0 + t and key u
// of chunk kv is k0 + u, so the pair's diagonal sits q0 - k0 keys further on and its prefix-LM
// keys are the first prefix_len - k0.
Mask chunk_mask(const RingProblem& p, const Chunk& q, const Chunk& kv) {
  Mask m = p.mask;
  m.align = CausalAlign::top_left;
  m.diagonal_offset = q.first_token() - kv.first_token();
  m.prefix_len = std::clamp<std::int64_t>(p.mask.prefix_len - kv.first_token(), 0, kv.len);
  return m;
}

// Every rank's problem header, passed R - 1 times around the ring, must equal this rank's. All
// ranks see every header, so a mismatch throws on each of them and none waits for the others.
void check_same_on_every_rank(const RingProblem& p, const Shard& s) {
  RingCommunicator& comm = *p.comm;
  const double scale = p.softmax_scale ? double(*p.softmax_scale) : -1.0;
  const Mask& m = p.mask;
  const std::vector<double> mine{double(s.batch),        double(s.len),
                                 double(s.heads_q),      double(s.heads_kv),
                                 double(s.dim),          double(s.dim_v),
                                 double(p.q.dtype()),    double(p.k.dtype()),
                                 double(m.causal),       double(m.window_left),
                                 double(m.window_right), double(m.prefix_len),
                                 double(m.softcap),      double(m.alibi_slopes.defined()),
                                 double(p.layout),       scale};
  std::vector<double> held = mine, next(mine.size());
  std::vector<std::vector<double>> seen{mine};
  for (int step = 1; step < comm.size(); ++step) {
    const Tensor send(held.data(), DType::f64, {std::int64_t(held.size())});
    const Tensor recv(next.data(), DType::f64, {std::int64_t(next.size())});
    comm.shift(send, recv);
    std::swap(held, next);
    seen.push_back(held);
  }
  for (std::size_t i = 1; i < seen.size(); ++i) {
    if (seen[i] != mine) {
      const int other = (comm.rank() - int(i) + comm.size()) % comm.size();
      fail("q", "the same shard shapes, dtypes, mask, layout and scale on every rank",
           "rank " + num(other) + "'s differing from rank " + num(comm.rank()) + "'s");
    }
  }
}

// Calls visit(q chunk, kv chunk) for each chunk pair of this rank's queries and the shard it
// holds at `step` that the mask lets meet.
template <class Visit>
void for_each_visible_pair(const RingProblem& p, const Shard& s, const core::MaskRule& rule,
                           int step, Visit&& visit) {
  const int ranks = p.comm->size(), rank = p.comm->rank();
  const int source = (rank - step + ranks) % ranks;  // whose shard this rank holds
  for (const Chunk& qc : dist::shard_chunks(p.layout, ranks, rank, s.len)) {
    for (const Chunk& kc : dist::shard_chunks(p.layout, ranks, source, s.len)) {
      if (dist::chunks_meet(rule, qc, kc, s.len * ranks)) visit(qc, kc);
    }
  }
}

// Rows in a query chunk: half the shard with zigzag, all of it otherwise.
std::int64_t chunk_rows(const RingProblem& p, const Shard& s) {
  return p.layout == RingLayout::zigzag ? s.len / 2 : s.len;
}

// Runs `body`; if it throws, the other ranks' shifts are released with an Error.
template <class Body>
void aborting_ring_on_error(RingCommunicator* comm, Body&& body) {
  try {
    body();
  } catch (...) {
    comm->abort();
    throw;
  }
}

void forward(const RingAttentionArgs& a) {
  AttentionArgs whole;
  static_cast<AttentionProblem&>(whole) = shard_problem(a);
  whole.out = a.out;
  whole.lse = a.lse;
  const core::MaskRule rule = core::validate_forward(whole).mask;
  const Shard s = check_local(a, a.lse);
  check_same_on_every_rank(a, s);

  const std::int64_t chunk = chunk_rows(a, s);
  HeldShard held(a, s, false);
  Buffer acc_o(DType::f32, s.batch, s.len, s.heads_q, s.dim_v);
  Buffer acc_lse(DType::f32, s.batch, s.heads_q, s.len);
  acc_lse.fill(-std::numeric_limits<float>::infinity());
  Buffer part_o(DType::f32, s.batch, chunk, s.heads_q, s.dim_v);
  Buffer part_lse(DType::f32, s.batch, s.heads_q, chunk);

  const int ranks = a.comm->size();
  for (int step = 0; step < ranks; ++step) {
    for_each_visible_pair(a, s, rule, step, [&](const Chunk& qc, const Chunk& kc) {
      AttentionArgs p;
      p.q = rows_of(a.q, qc.local_start, qc.len);
      p.k = rows_of(held.k(), kc.local_start, kc.len);
      p.v = rows_of(held.v(), kc.local_start, kc.len);
      p.softmax_scale = a.softmax_scale;
      p.mask = chunk_mask(a, qc, kc);
      p.out = rows_of(part_o.view(), 0, qc.len);
      p.lse = lse_columns(part_lse.view(), 0, qc.len);
      attention_forward(p);
      dist::merge_partial(rows_of(acc_o.view(), qc.local_start, qc.len),
                          lse_columns(acc_lse.view(), qc.local_start, qc.len), p.out, p.lse);
    });
    if (step + 1 < ranks) held.shift(*a.comm, false);
  }
  dist::copy_into(a.out, acc_o.view());
  dist::copy_into(a.lse, acc_lse.view());
}

void backward(const RingBackwardArgs& a) {
  BackwardArgs whole;
  static_cast<AttentionProblem&>(whole) = shard_problem(a);
  whole.out = a.out;
  whole.lse = a.lse;
  whole.dout = a.dout;
  whole.dq = a.dq;
  whole.dk = a.dk;
  whole.dv = a.dv;
  const core::MaskRule rule = core::validate_backward(whole).mask;
  const Shard s = check_local(a, a.lse);
  check_same_on_every_rank(a, s);

  const std::int64_t chunk = chunk_rows(a, s);
  HeldShard held(a, s, true);
  Buffer dq_acc(DType::f32, s.batch, s.len, s.heads_q, s.dim);
  Buffer dq_part(DType::f32, s.batch, chunk, s.heads_q, s.dim);
  Buffer dk_part(DType::f32, s.batch, chunk, s.heads_kv, s.dim);
  Buffer dv_part(DType::f32, s.batch, chunk, s.heads_kv, s.dim_v);

  const int ranks = a.comm->size();
  for (int step = 0; step < ranks; ++step) {
    for_each_visible_pair(a, s, rule, step, [&](const Chunk& qc, const Chunk& kc) {
      BackwardArgs p;
      p.q = rows_of(a.q, qc.local_start, qc.len);
      p.k = rows_of(held.k(), kc.local_start, kc.len);
      p.v = rows_of(held.v(), kc.local_start, kc.len);
      p.softmax_scale = a.softmax_scale;
      p.mask = chunk_mask(a, qc, kc);
      p.out = rows_of(a.out, qc.local_start, qc.len);
      p.lse = lse_columns(a.lse, qc.local_start, qc.len);
      p.dout = rows_of(a.dout, qc.local_start, qc.len);
      p.dq = rows_of(dq_part.view(), 0, qc.len);
      p.dk = rows_of(dk_part.view(), 0, kc.len);
      p.dv = rows_of(dv_part.view(), 0, kc.len);
      attention_backward(p);
      dist::add_into(rows_of(dq_acc.view(), qc.local_start, qc.len), p.dq);
      dist::add_into(rows_of(held.dk(), kc.local_start, kc.len), p.dk);
      dist::add_into(rows_of(held.dv(), kc.local_start, kc.len), p.dv);
    });
    // The accumulators move every step, the last one taking them home (to rank + 1, whose shard
    // this rank holds at the last step); K and V need not make that last move.
    held.shift(*a.comm, step + 1 == ranks);
  }
  dist::copy_into(a.dq, dq_acc.view());
  dist::copy_into(a.dk, held.dk());
  dist::copy_into(a.dv, held.dv());
}

}  // namespace

void ring_attention_forward(const RingAttentionArgs& args) {
  if (args.comm == nullptr) fail("comm", "a RingCommunicator (make_in_process_ring)", "null");
  aborting_ring_on_error(args.comm, [&] { forward(args); });
}

void ring_attention_backward(const RingBackwardArgs& args) {
  if (args.comm == nullptr) fail("comm", "a RingCommunicator (make_in_process_ring)", "null");
  aborting_ring_on_error(args.comm, [&] { backward(args); });
}

}  // namespace flashkit
