// Ring attention: each step runs attention_forward / attention_backward on chunk pairs of this
// rank's queries and the K/V shard it holds (the global mask moved to the pair by
// Mask::diagonal_offset, or dropped where the pair sees every key, chunks seen whole side by side
// in one call), merges or adds the results,
// and shifts the shard (and, backward, its gradient accumulator) one rank along the ring. The
// same steps run on the CPU and, queued on the caller's streams, on a CUDA device.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/checks.hpp"
#include "core/validate.hpp"
#include "dist/ring_plan.hpp"
#include "dist/ring_streams.hpp"
#include "flashkit/error.hpp"
#include "flashkit/ring.hpp"
#if FLASHKIT_HAVE_CUDA
#include "cuda/common/device.hpp"
#include "cuda/ring_ops.hpp"
#endif

namespace flashkit {

namespace {

using core::fail;
using core::num;
using dist::Arrival;
using dist::Chunk;
using dist::lse_columns;
using dist::RingBuffer;
using dist::rows_of;

struct Shard {
  std::int64_t batch, len, heads_q, heads_kv, dim, dim_v;
};

// The shard as one attention problem, so its shapes, dtypes and devices are checked as usual.
AttentionProblem shard_problem(const RingProblem& p) {
  AttentionProblem whole;
  whole.q = p.q;
  whole.k = p.k;
  whole.v = p.v;
  whole.softmax_scale = p.softmax_scale;
  whole.mask = p.mask;
  whole.deterministic = p.deterministic;
  whole.stream = p.stream;
  return whole;
}

// What the ring adds to the shard's own checks, none of which needs another rank.
Shard check_local(const RingProblem& p, const Tensor& lse) {
#if FLASHKIT_HAVE_CUDA
  // Before any buffer is made on it: present, and current (the attention calls launch there).
  if (p.q.device().is_cuda()) cuda::current_device_capability("q", p.q.device());
#else
  if (p.q.device().is_cuda()) {
    fail("q.device", "cpu (this build has no CUDA backend)", p.q.device().str());
  }
#endif
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

// The problem header every rank must share, led by whether this rank's own checks passed.
std::vector<double> header(const RingProblem& p, const std::optional<Shard>& s) {
  if (!s) return std::vector<double>(17, 0.0);
  const double scale = p.softmax_scale ? double(*p.softmax_scale) : -1.0;
  const Mask& m = p.mask;
  return {1.0,
          double(s->batch),
          double(s->len),
          double(s->heads_q),
          double(s->heads_kv),
          double(s->dim),
          double(s->dim_v),
          double(p.q.dtype()),
          double(p.k.dtype()),
          double(m.causal),
          double(m.window_left),
          double(m.window_right),
          double(m.prefix_len),
          double(m.softcap),
          double(m.alibi_slopes.defined()),
          double(p.layout),
          scale};
}

// Passes `mine` R - 1 times around the ring and returns every rank's, starting with this rank's
// left neighbour. Row t of one [R, n] buffer goes on as row t + 1; CUDA shards pass it through
// device memory (an NCCL ring moves nothing else), with one copy in and one copy out, each
// synchronising `stream`.
std::vector<std::vector<double>> every_header(const RingProblem& p,
                                              const std::vector<double>& mine) {
  RingCommunicator& comm = *p.comm;
  const Device device = p.q.defined() && p.q.device().is_cuda() ? p.q.device() : Device::cpu();
  const std::int64_t ranks = comm.size(), n = std::int64_t(mine.size());
  std::vector<double> all(std::size_t(ranks * n));
  std::copy(mine.begin(), mine.end(), all.begin());
  if (ranks > 1) {
    RingBuffer rows(device, p.stream, DType::f64, {ranks, n});
    auto row = [&](std::int64_t t) {
      return Tensor(rows.view().data_as<double>() + t * n, DType::f64, {n}, device);
    };
    const std::size_t bytes = all.size() * sizeof(double);
    if (device.is_cpu()) std::copy(all.begin(), all.end(), rows.view().data_as<double>());
#if FLASHKIT_HAVE_CUDA
    if (device.is_cuda())
      cuda::ring_copy_to_device(rows.view().data(), all.data(), bytes, p.stream);
#endif
    for (std::int64_t t = 0; t + 1 < ranks; ++t) comm.shift(row(t), row(t + 1), p.stream);
    if (device.is_cpu()) std::copy_n(rows.view().data_as<const double>(), all.size(), all.begin());
#if FLASHKIT_HAVE_CUDA
    if (device.is_cuda()) cuda::ring_copy_to_host(all.data(), rows.view().data(), bytes, p.stream);
#endif
    (void)bytes;
  }
  std::vector<std::vector<double>> seen;
  for (std::int64_t t = 1; t < ranks; ++t) {
    seen.emplace_back(all.begin() + t * n, all.begin() + (t + 1) * n);
  }
  return seen;
}

// Runs the local checks and passes their outcome and the problem header around the ring: a rank
// whose checks failed throws its own Error, every other rank one naming that rank, and ranks whose
// headers differ all throw; so no rank is left waiting in a shift for one that gave up.
template <class LocalChecks>
Shard agree_on_problem(const RingProblem& p, LocalChecks&& local_checks) {
  std::optional<Error> failed;
  std::optional<Shard> s;
  try {
    s = local_checks();
  } catch (const Error& e) {
    failed = e;
  }
  const std::vector<double> mine = header(p, s);
  std::vector<std::vector<double>> seen;
  try {
    seen = every_header(p, mine);
  } catch (const Error&) {
    if (failed) throw *failed;
    throw;
  }
  if (failed) throw *failed;
  const int rank = p.comm->rank(), ranks = p.comm->size();
  for (std::size_t i = 0; i < seen.size(); ++i) {
    const int other = (rank - int(i) - 1 + ranks) % ranks;
    if (seen[i][0] == 0.0) {
      throw Error("ring: another rank's call failed (rank " + num(other) +
                  " found its arguments invalid), so this rank's call was abandoned");
    }
  }
  for (std::size_t i = 0; i < seen.size(); ++i) {
    if (seen[i] != mine) {
      const int other = (rank - int(i) - 1 + ranks) % ranks;
      fail("q", "the same shard shapes, dtypes, mask, layout and scale on every rank",
           "rank " + num(other) + "'s differing from rank " + num(rank) + "'s");
    }
  }
  return *s;
}

// The K/V shard a rank holds at a step: its own at step 0 (the caller's tensors, read in place
// when contiguous, the form a shift sends), then the shard that arrived. Arrivals alternate
// between two buffers, so the one being read is never the one being written: a ring of two ranks
// needs one, a single rank none. They are made here, before the call's streams are joined to
// the main one, so the comm stream's first wait orders their allocation too.
class HeldShard {
 public:
  HeldShard(const RingProblem& p, const Shard& s) : k_(p.k), v_(p.v) {
    const int ranks = p.comm->size();
    const bool in_place = p.k.is_contiguous() && p.v.is_contiguous();
    const int needed = ranks == 1 ? 0 : (ranks == 2 && in_place ? 1 : 2);
    auto make = [&](const Tensor& like) {
      return RingBuffer(p.q.device(), p.stream, like.dtype(),
                        {s.batch, s.len, s.heads_kv, like.size(3)});
    };
    for (int i = 0; i < needed; ++i) buffers_.push_back(Buffers{make(p.k), make(p.v)});
    if (ranks > 1 && !in_place) {
      take(0);
      dist::copy_into(k_, p.k, p.stream);
      dist::copy_into(v_, p.v, p.stream);
    }
  }
  const Tensor& k() const { return k_; }
  const Tensor& v() const { return v_; }
  // Queues the held shard's trip to the next rank, and the previous rank's into the free buffer.
  void send(RingCommunicator& comm, void* stream) {
    next_ = held_ == 0 ? 1 : 0;
    comm.shift(k_, buffers_[std::size_t(next_)].k.view(), stream);
    comm.shift(v_, buffers_[std::size_t(next_)].v.view(), stream);
  }
  void take_next() { take(next_); }

 private:
  struct Buffers {
    RingBuffer k, v;
  };
  void take(int i) {
    held_ = i;
    k_ = buffers_[std::size_t(i)].k.view();
    v_ = buffers_[std::size_t(i)].v.view();
  }

  Tensor k_, v_;
  std::vector<Buffers> buffers_;
  int held_ = -1, next_ = -1;  // buffer indices; -1: the caller's tensors
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

// The mask of a call in which every query sees every key: no position rule left for the kernels
// to test (softcap stays; ALiBi never gets here, its scores need the positions).
Mask unmasked(const RingProblem& p) {
  Mask m = p.mask;
  m.causal = false;
  m.window_left = m.window_right = -1;
  m.prefix_len = 0;
  return m;
}

// Rows [local_start, local_start + len) of the held shard that one attention call reads.
struct KeyRows {
  std::int64_t local_start, len;
};

// One attention call of a step: a query chunk against rows of the held shard, under `mask`.
struct PairCall {
  Chunk q;
  KeyRows keys;
  Mask mask;
};

// The attention calls of this rank's queries against the shard it holds at each step: one per
// chunk pair that the mask lets meet, except that chunks next to each other in the shard that a
// query chunk sees whole are one call (zigzag's late chunk sees both chunks of every shard from
// the ranks after it: one call of L keys instead of two calls and two merges). Every query sees
// its own key (a key band always holds the diagonal), so each query chunk of a non-empty shard
// has at least one call.
std::vector<std::vector<PairCall>> plan_calls(const RingProblem& p, const Shard& s,
                                              const core::MaskRule& rule) {
  const int ranks = p.comm->size(), rank = p.comm->rank();
  const std::int64_t total = s.len * ranks;
  const bool alibi = p.mask.alibi_slopes.defined();
  std::vector<std::vector<PairCall>> plan(static_cast<std::size_t>(ranks));
  for (int step = 0; step < ranks; ++step) {
    const int source = (rank - step + ranks) % ranks;  // whose shard this rank holds
    std::vector<PairCall>& calls = plan[std::size_t(step)];
    for (const Chunk& qc : dist::shard_chunks(p.layout, ranks, rank, s.len)) {
      std::optional<KeyRows> whole;  // seen whole, not yet planned
      for (const Chunk& kc : dist::shard_chunks(p.layout, ranks, source, s.len)) {
        if (!dist::chunks_meet(rule, qc, kc, total)) continue;
        const bool everything = dist::pair_sees_everything(rule, alibi, qc, kc, total);
        if (everything && whole && whole->local_start + whole->len == kc.local_start) {
          whole->len += kc.len;
          continue;
        }
        if (whole) calls.push_back({qc, *whole, unmasked(p)});
        whole.reset();
        if (everything) {
          whole = KeyRows{kc.local_start, kc.len};
        } else {
          calls.push_back({qc, KeyRows{kc.local_start, kc.len}, chunk_mask(p, qc, kc)});
        }
      }
      if (whole) calls.push_back({qc, *whole, unmasked(p)});
    }
  }
  return plan;
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

// Index of a chunk of the shard (0, or 0 and 1 with zigzag) from its first row.
std::size_t chunk_index(std::int64_t local_start, std::int64_t chunk) {
  return std::size_t(local_start / chunk);
}

// How many calls each query chunk takes over the whole ring.
std::vector<int> calls_per_query_chunk(const std::vector<std::vector<PairCall>>& plan,
                                       std::int64_t chunk) {
  std::vector<int> calls(2, 0);
  for (const auto& step : plan) {
    for (const PairCall& c : step) ++calls[chunk_index(c.q.local_start, chunk)];
  }
  return calls;
}

// A query chunk's first call writes its f32 state in place, each later one merges into it, and
// the last merge (or an only call) writes the caller's out and lse: no state to clear first and
// no copy at the end.
void run_forward(const RingAttentionArgs& a, const Shard& s, const core::MaskRule& rule) {
  const Device dev = a.q.device();
  const std::int64_t chunk = chunk_rows(a, s);
  const auto plan = plan_calls(a, s, rule);
  const std::vector<int> calls = calls_per_query_chunk(plan, chunk);
  const bool merges = *std::max_element(calls.begin(), calls.end()) > 1;
  HeldShard held(a, s);
  std::optional<RingBuffer> acc_o, acc_lse, part_o, part_lse;
  if (merges) {
    acc_o.emplace(dev, a.stream, DType::f32,
                  std::initializer_list<std::int64_t>{s.batch, s.len, s.heads_q, s.dim_v});
    acc_lse.emplace(dev, a.stream, DType::f32,
                    std::initializer_list<std::int64_t>{s.batch, s.heads_q, s.len});
    part_o.emplace(dev, a.stream, DType::f32,
                   std::initializer_list<std::int64_t>{s.batch, chunk, s.heads_q, s.dim_v});
    part_lse.emplace(dev, a.stream, DType::f32,
                     std::initializer_list<std::int64_t>{s.batch, s.heads_q, chunk});
  }
  dist::RingStreams streams(a);  // after the buffers: it joins the streams before they are freed

  std::vector<int> done(calls.size(), 0);
  const int ranks = a.comm->size();
  for (int step = 0; step < ranks; ++step) {
    const bool more = step + 1 < ranks;
    if (more) {
      streams.comm_waits_main();  // the buffer it fills was read by the step before
      held.send(*a.comm, streams.comm());
      streams.mark(Arrival::kv);
    }
    for (const PairCall& c : plan[std::size_t(step)]) {
      const std::size_t qi = chunk_index(c.q.local_start, chunk);
      const int n = ++done[qi];
      const Tensor out = rows_of(a.out, c.q.local_start, c.q.len);
      const Tensor lse = lse_columns(a.lse, c.q.local_start, c.q.len);
      AttentionArgs p;
      p.q = rows_of(a.q, c.q.local_start, c.q.len);
      p.k = rows_of(held.k(), c.keys.local_start, c.keys.len);
      p.v = rows_of(held.v(), c.keys.local_start, c.keys.len);
      p.softmax_scale = a.softmax_scale;
      p.mask = c.mask;
      p.stream = a.stream;
      if (calls[qi] == 1) {
        p.out = out;
        p.lse = lse;
        attention_forward(p);
        continue;
      }
      const Tensor acc = rows_of(acc_o->view(), c.q.local_start, c.q.len);
      const Tensor acc_l = lse_columns(acc_lse->view(), c.q.local_start, c.q.len);
      p.out = n == 1 ? acc : rows_of(part_o->view(), 0, c.q.len);
      p.lse = n == 1 ? acc_l : lse_columns(part_lse->view(), 0, c.q.len);
      attention_forward(p);
      if (n == 1) continue;
      const bool last = n == calls[qi];
      dist::merge_partial(acc, acc_l, p.out, p.lse, last ? out : acc, last ? lse : acc_l, a.stream);
    }
    if (more) {
      streams.main_waits(Arrival::kv);
      held.take_next();
    }
  }
}

// The backward's dK / dV accumulators. The one of the shard a rank computes with at step t arrives
// from the rank before while the rank computes its own part (`step`); the rank then adds what
// arrived and sends the sum on, so only that add waits for the shift. Two `step` buffers take
// turns: one is filled while the other travels.
class GradRing {
 public:
  GradRing(const RingProblem& p, const Shard& s) {
    for (int i = 0; i < 2; ++i) {
      for (std::int64_t dim : {s.dim, s.dim_v}) {
        step_[i].emplace_back(p.q.device(), p.stream, DType::f32,
                              std::initializer_list<std::int64_t>{s.batch, s.len, s.heads_kv, dim});
      }
    }
    for (std::int64_t dim : {s.dim, s.dim_v}) {
      arrived_.emplace_back(p.q.device(), p.stream, DType::f32,
                            std::initializer_list<std::int64_t>{s.batch, s.len, s.heads_kv, dim});
    }
  }
  // This step's dK and dV of the held shard.
  const Tensor& dk(int step) const { return step_[step % 2][0].view(); }
  const Tensor& dv(int step) const { return step_[step % 2][1].view(); }
  // Adds the accumulator that arrived (none at step 0) into this step's part.
  void add_arrived(int step, void* stream) {
    if (step == 0) return;
    for (int i = 0; i < 2; ++i) {
      const Tensor& part = step_[step % 2][std::size_t(i)].view();
      dist::add_into(part, part, arrived_[std::size_t(i)].view(), stream);
    }
  }
  // Queues this step's sum to the next rank; the previous rank's lands in `arrived`.
  void send(int step, RingCommunicator& comm, void* stream) {
    for (int i = 0; i < 2; ++i) {
      comm.shift(step_[step % 2][std::size_t(i)].view(), arrived_[std::size_t(i)].view(), stream);
    }
  }
  const Tensor& arrived_dk() const { return arrived_[0].view(); }
  const Tensor& arrived_dv() const { return arrived_[1].view(); }

 private:
  std::vector<RingBuffer> step_[2], arrived_;  // dk, dv each
};

// Which key chunks of this step's dK / dV part a call has written: a call whose keys are all
// unwritten writes its gradients there in place; one that overlaps written keys writes a scratch
// part that is added (its unwritten chunks cleared first); chunks no call wrote are cleared
// before the part is summed and sent.
class KeyChunksWritten {
 public:
  KeyChunksWritten(std::int64_t chunk, std::size_t chunks) : chunk_(chunk), written_(chunks) {}
  void reset() { std::fill(written_.begin(), written_.end(), false); }
  bool any(const KeyRows& k) const {
    for (std::size_t i = first(k); i <= last(k); ++i) {
      if (written_[i]) return true;
    }
    return false;
  }
  // Calls clear(rows) for the unwritten chunks among k's (every chunk when k is null), then marks
  // them written.
  template <class Clear>
  void clear_unwritten(const KeyRows* k, Clear&& clear) {
    const std::size_t lo = k ? first(*k) : 0, hi = k ? last(*k) : written_.size() - 1;
    for (std::size_t i = lo; i <= hi && i < written_.size(); ++i) {
      if (!written_[i]) clear(KeyRows{std::int64_t(i) * chunk_, chunk_});
      written_[i] = true;
    }
  }
  void mark(const KeyRows& k) {
    for (std::size_t i = first(k); i <= last(k); ++i) written_[i] = true;
  }

 private:
  std::size_t first(const KeyRows& k) const { return std::size_t(k.local_start / chunk_); }
  std::size_t last(const KeyRows& k) const {
    return std::size_t((k.local_start + k.len - 1) / chunk_);
  }
  std::int64_t chunk_;
  std::vector<bool> written_;
};

// True when some step has a call whose keys an earlier call of the step wrote.
bool calls_share_keys(const std::vector<std::vector<PairCall>>& plan, std::int64_t chunk,
                      std::size_t chunks) {
  KeyChunksWritten written(chunk, chunks);
  for (const auto& step : plan) {
    written.reset();
    for (const PairCall& c : step) {
      if (written.any(c.keys)) return true;
      written.mark(c.keys);
    }
  }
  return false;
}

// dQ like the forward's state: a query chunk's first call writes its f32 sum in place, later
// ones add into it, and the last add (or an only call) writes the caller's dq.
void run_backward(const RingBackwardArgs& a, const Shard& s, const core::MaskRule& rule) {
  const Device dev = a.q.device();
  const std::int64_t chunk = chunk_rows(a, s);
  const auto plan = plan_calls(a, s, rule);
  const std::vector<int> calls = calls_per_query_chunk(plan, chunk);
  const bool sums = *std::max_element(calls.begin(), calls.end()) > 1;
  HeldShard held(a, s);
  GradRing grads(a, s);
  std::optional<RingBuffer> dq_acc, dq_part;
  if (sums) {
    dq_acc.emplace(dev, a.stream, DType::f32,
                   std::initializer_list<std::int64_t>{s.batch, s.len, s.heads_q, s.dim});
    dq_part.emplace(dev, a.stream, DType::f32,
                    std::initializer_list<std::int64_t>{s.batch, chunk, s.heads_q, s.dim});
  }
  const std::size_t key_chunks = s.len > 0 ? std::size_t(s.len / chunk) : 0;
  std::optional<RingBuffer> dk_part, dv_part;  // a call's keys
  if (calls_share_keys(plan, chunk, key_chunks)) {
    dk_part.emplace(dev, a.stream, DType::f32,
                    std::initializer_list<std::int64_t>{s.batch, s.len, s.heads_kv, s.dim});
    dv_part.emplace(dev, a.stream, DType::f32,
                    std::initializer_list<std::int64_t>{s.batch, s.len, s.heads_kv, s.dim_v});
  }
  dist::RingStreams streams(a);  // after the buffers: it joins the streams before they are freed

  KeyChunksWritten written(chunk, key_chunks);
  std::vector<int> done(calls.size(), 0);
  const int ranks = a.comm->size();
  for (int step = 0; step < ranks; ++step) {
    const bool more = step + 1 < ranks;
    if (more) {
      streams.comm_waits_main();
      held.send(*a.comm, streams.comm());
      streams.mark(Arrival::kv);
    }
    const Tensor& dk_sum = grads.dk(step);
    const Tensor& dv_sum = grads.dv(step);
    auto clear = [&](const KeyRows& k) {
      dist::fill(rows_of(dk_sum, k.local_start, k.len), 0.0f, a.stream);
      dist::fill(rows_of(dv_sum, k.local_start, k.len), 0.0f, a.stream);
    };
    written.reset();
    for (const PairCall& c : plan[std::size_t(step)]) {
      const std::size_t qi = chunk_index(c.q.local_start, chunk);
      const int n = ++done[qi];
      const Tensor dq = rows_of(a.dq, c.q.local_start, c.q.len);
      const Tensor dk_rows = rows_of(dk_sum, c.keys.local_start, c.keys.len);
      const Tensor dv_rows = rows_of(dv_sum, c.keys.local_start, c.keys.len);
      const bool keys_fresh = !written.any(c.keys);
      BackwardArgs p;
      p.q = rows_of(a.q, c.q.local_start, c.q.len);
      p.k = rows_of(held.k(), c.keys.local_start, c.keys.len);
      p.v = rows_of(held.v(), c.keys.local_start, c.keys.len);
      p.softmax_scale = a.softmax_scale;
      p.mask = c.mask;
      p.deterministic = a.deterministic;
      p.stream = a.stream;
      p.out = rows_of(a.out, c.q.local_start, c.q.len);
      p.lse = lse_columns(a.lse, c.q.local_start, c.q.len);
      p.dout = rows_of(a.dout, c.q.local_start, c.q.len);
      const Tensor dq_in_place =
          calls[qi] == 1 ? dq : rows_of(dq_acc->view(), c.q.local_start, c.q.len);
      p.dq = n == 1 ? dq_in_place : rows_of(dq_part->view(), 0, c.q.len);
      p.dk = keys_fresh ? dk_rows : rows_of(dk_part->view(), 0, c.keys.len);
      p.dv = keys_fresh ? dv_rows : rows_of(dv_part->view(), 0, c.keys.len);
      if (!keys_fresh) written.clear_unwritten(&c.keys, clear);
      written.mark(c.keys);
      attention_backward(p);
      if (n > 1) {
        dist::add_into(n == calls[qi] ? dq : dq_in_place, dq_in_place, p.dq, a.stream);
      }
      if (!keys_fresh) {
        dist::add_into(dk_rows, dk_rows, p.dk, a.stream);
        dist::add_into(dv_rows, dv_rows, p.dv, a.stream);
      }
    }
    written.clear_unwritten(nullptr, clear);
    if (step > 0) streams.main_waits(Arrival::grads);
    grads.add_arrived(step, a.stream);
    // The sum moves on every step, the last one taking it home (to rank + 1, whose shard this
    // rank holds at the last step).
    streams.comm_waits_main();
    grads.send(step, *a.comm, streams.comm());
    streams.mark(Arrival::grads);
    if (more) {
      streams.main_waits(Arrival::kv);
      held.take_next();
    }
  }
  streams.main_waits(Arrival::grads);
  dist::copy_into(a.dk, grads.arrived_dk(), a.stream);
  dist::copy_into(a.dv, grads.arrived_dv(), a.stream);
}

void forward(const RingAttentionArgs& a) {
  core::MaskRule rule;
  const Shard s = agree_on_problem(a, [&] {
    AttentionArgs whole;
    static_cast<AttentionProblem&>(whole) = shard_problem(a);
    whole.out = a.out;
    whole.lse = a.lse;
    rule = core::validate_forward(whole).mask;
    return check_local(a, a.lse);
  });
  aborting_ring_on_error(a.comm, [&] { run_forward(a, s, rule); });
}

void backward(const RingBackwardArgs& a) {
  core::MaskRule rule;
  const Shard s = agree_on_problem(a, [&] {
    BackwardArgs whole;
    static_cast<AttentionProblem&>(whole) = shard_problem(a);
    whole.out = a.out;
    whole.lse = a.lse;
    whole.dout = a.dout;
    whole.dq = a.dq;
    whole.dk = a.dk;
    whole.dv = a.dv;
    rule = core::validate_backward(whole).mask;
    return check_local(a, a.lse);
  });
  aborting_ring_on_error(a.comm, [&] { run_backward(a, s, rule); });
}

}  // namespace

void ring_attention_forward(const RingAttentionArgs& args) {
  if (args.comm == nullptr) fail("comm", "a RingCommunicator (make_in_process_ring)", "null");
  forward(args);
}

void ring_attention_backward(const RingBackwardArgs& args) {
  if (args.comm == nullptr) fail("comm", "a RingCommunicator (make_in_process_ring)", "null");
  backward(args);
}

}  // namespace flashkit
