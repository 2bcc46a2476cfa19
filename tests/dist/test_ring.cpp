// Ring attention on the in-process ring against the fp64 oracle on the whole sequence: every
// rank's outputs, lse and gradients at their global positions, over ring sizes 1-4, both layouts,
// causal and not, GQA, softcap and bf16 inputs, sliding windows (narrower and wider than a
// chunk), prefix-LM and ALiBi. Then the zigzag balance the layout exists for, and bad calls: an
// Error on every rank, never a rank left waiting.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "flashkit/attention.hpp"
#include "flashkit/error.hpp"
#include "flashkit/ring.hpp"
#include "host_tensor.hpp"

namespace flashkit::testing {
namespace {

struct RingSpec {
  int ranks = 2;
  RingLayout layout = RingLayout::zigzag;
  bool causal = true;
  float softcap = 0.0f;
  std::int64_t window_left = -1, window_right = -1, prefix_len = 0;
  bool alibi = false;
  DType dtype = DType::f32;
  DType out_dtype = DType::f32;  // of out, dq, dk and dv
  bool strided_kv = false;       // K and V shards as views inside a wider allocation
  std::int64_t batch = 2, local = 6, heads_q = 4, heads_kv = 2, dim = 32;
  std::uint32_t seed = 1;

  std::int64_t total() const { return local * ranks; }
  std::string name() const {
    return std::to_string(ranks) + " ranks, " +
           (layout == RingLayout::zigzag ? "zigzag" : "contiguous") + (causal ? ", causal" : "") +
           (softcap > 0 ? ", softcap" : "") + ", window " + std::to_string(window_left) + "/" +
           std::to_string(window_right) + ", prefix " + std::to_string(prefix_len) +
           (alibi ? ", alibi" : "") + ", " + dtype_name(dtype) + " in, " + dtype_name(out_dtype) +
           " out" + (strided_kv ? ", strided K/V" : "");
  }
  // The global mask; ALiBi's slopes (2^-(h + 2) for head h) live in `slopes`.
  Mask mask(const HostTensor& slopes) const {
    Mask m;
    m.causal = causal;
    m.softcap = softcap;
    m.window_left = window_left;
    m.window_right = window_right;
    m.prefix_len = prefix_len;
    if (alibi) m.alibi_slopes = slopes;
    return m;
  }
};

// Element e of row t (of `heads` heads of `dim`) of batch b in a [batch, n, heads, dim] order.
std::size_t index(std::int64_t b, std::int64_t n, std::int64_t t, std::int64_t heads,
                  std::int64_t h, std::int64_t dim, std::int64_t e) {
  return std::size_t(((b * n + t) * heads + h) * dim + e);
}

// The rows of `global` ([batch, total, heads, dim] values) that `rank` holds, as a tensor (a view
// of every other head of a twice wider one when `strided`).
HostTensor shard_of(const std::vector<double>& global, const RingSpec& s, int rank,
                    std::int64_t heads, DType dtype, bool strided = false) {
  HostTensor t = strided ? HostTensor(dtype, {s.batch, s.local, heads, s.dim},
                                      {s.batch, s.local, 2 * heads, s.dim})
                         : HostTensor(dtype, {s.batch, s.local, heads, s.dim});
  std::vector<double> v;
  for (std::int64_t b = 0; b < s.batch; ++b) {
    for (std::int64_t i = 0; i < s.local; ++i) {
      const std::int64_t g = ring_global_position(s.layout, s.ranks, rank, s.local, i);
      for (std::int64_t h = 0; h < heads; ++h) {
        for (std::int64_t e = 0; e < s.dim; ++e) {
          v.push_back(global[index(b, s.total(), g, heads, h, s.dim, e)]);
        }
      }
    }
  }
  t.set_values(v);
  return t;
}

struct Oracle {
  std::vector<double> out, lse, dq, dk, dv;  // global order; lse [batch, heads, total]
};

// Forward then backward on the whole sequence in one (non-ring) call: the fp64 oracle with
// `out_dtype` f64, or the plain same-precision reference the ring is held to for 16-bit outputs
// (whose backward reads the rounded out, as the ring's does).
Oracle whole_sequence(const RingSpec& s, const HostTensor& q, const HostTensor& k,
                      const HostTensor& v, const HostTensor& dout, const HostTensor& slopes,
                      DType out_dtype) {
  const bool exact = out_dtype == DType::f64;
  const DType in = exact ? DType::f64 : s.dtype;
  HostTensor qx(in, q.shape()), kx(in, k.shape()), vx(in, v.shape()), dox(in, dout.shape());
  qx.set_values(q.values());
  kx.set_values(k.values());
  vx.set_values(v.values());
  dox.set_values(dout.values());
  HostTensor out(out_dtype, q.shape()), lse(DType::f32, {s.batch, s.heads_q, s.total()});
  HostTensor dq(out_dtype, q.shape()), dk(out_dtype, k.shape()), dv(out_dtype, v.shape());
  AttentionArgs f;
  f.q = qx;
  f.k = kx;
  f.v = vx;
  f.mask = s.mask(slopes);
  if (exact) f.algo = Algo::reference;
  f.out = out;
  f.lse = lse;
  attention_forward(f);
  BackwardArgs g;
  static_cast<AttentionProblem&>(g) = f;
  g.out = out;
  g.lse = lse;
  g.dout = dox;
  g.dq = dq;
  g.dk = dk;
  g.dv = dv;
  attention_backward(g);
  return {out.values(), lse.values(), dq.values(), dk.values(), dv.values()};
}

// Largest |a - b| over two equally long lists (infinite for a NaN).
double max_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    m = std::max(m, std::isnan(a[i]) || std::isnan(b[i]) ? INFINITY : std::fabs(a[i] - b[i]));
  }
  return m;
}

struct RankResult {
  HostTensor out, lse, dq, dk, dv;
  std::string error;
};

double worst(double a, double b) {
  return std::isnan(a) || std::isnan(b) ? INFINITY : std::fabs(a - b);
}

// fp32 tiled paths merged across the ring: measured at most 4.8e-7 (forward) and 4.7e-7
// (backward) over these cases; the bounds leave 10x.
constexpr double kForwardTol = 5e-6;
constexpr double kBackwardTol = 5e-6;

void check_ring(const RingSpec& s) {
  SCOPED_TRACE(s.name());
  std::mt19937 rng(s.seed);
  HostTensor q(s.dtype, {s.batch, s.total(), s.heads_q, s.dim});
  HostTensor k(s.dtype, {s.batch, s.total(), s.heads_kv, s.dim});
  HostTensor v(s.dtype, {s.batch, s.total(), s.heads_kv, s.dim});
  HostTensor dout(s.dtype, {s.batch, s.total(), s.heads_q, s.dim});
  for (HostTensor* t : {&q, &k, &v, &dout}) t->fill_random(rng);
  HostTensor slopes(DType::f32, {s.heads_q});
  std::vector<double> slope_values;
  for (std::int64_t h = 0; h < s.heads_q; ++h) slope_values.push_back(std::ldexp(0.5, -int(h) - 1));
  slopes.set_values(slope_values);
  const Oracle want = whole_sequence(s, q, k, v, dout, slopes, DType::f64);

  auto ring = make_in_process_ring(s.ranks);
  std::vector<RankResult> got(std::size_t(s.ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < s.ranks; ++r) {
    threads.emplace_back([&, r] {
      RankResult& res = got[std::size_t(r)];
      try {
        const HostTensor qr = shard_of(q.values(), s, r, s.heads_q, s.dtype);
        const HostTensor kr = shard_of(k.values(), s, r, s.heads_kv, s.dtype, s.strided_kv);
        const HostTensor vr = shard_of(v.values(), s, r, s.heads_kv, s.dtype, s.strided_kv);
        const HostTensor dor = shard_of(dout.values(), s, r, s.heads_q, s.dtype);
        res.out = HostTensor(s.out_dtype, {s.batch, s.local, s.heads_q, s.dim});
        res.lse = HostTensor(DType::f32, {s.batch, s.heads_q, s.local});
        res.dq = HostTensor(s.out_dtype, qr.shape());
        res.dk = HostTensor(s.out_dtype, kr.shape());
        res.dv = HostTensor(s.out_dtype, vr.shape());
        for (HostTensor* t : {&res.out, &res.lse, &res.dq, &res.dk, &res.dv}) t->poison();
        RingAttentionArgs a;
        a.q = qr;
        a.k = kr;
        a.v = vr;
        a.mask = s.mask(slopes);
        a.layout = s.layout;
        a.comm = ring[std::size_t(r)].get();
        a.out = res.out;
        a.lse = res.lse;
        ring_attention_forward(a);
        RingBackwardArgs g;
        static_cast<RingProblem&>(g) = a;
        g.out = res.out;
        g.lse = res.lse;
        g.dout = dor;
        g.dq = res.dq;
        g.dk = res.dk;
        g.dv = res.dv;
        ring_attention_backward(g);
      } catch (const Error& e) {
        res.error = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();

  double fwd = 0, bwd = 0;
  for (int r = 0; r < s.ranks; ++r) {
    const RankResult& res = got[std::size_t(r)];
    ASSERT_EQ(res.error, "") << "rank " << r;
    const auto out = res.out.values(), lse = res.lse.values(), dq = res.dq.values();
    const auto dk = res.dk.values(), dv = res.dv.values();
    for (std::int64_t b = 0; b < s.batch; ++b) {
      for (std::int64_t i = 0; i < s.local; ++i) {
        const std::int64_t g = ring_global_position(s.layout, s.ranks, r, s.local, i);
        for (std::int64_t h = 0; h < s.heads_q; ++h) {
          fwd = std::max(fwd, worst(lse[std::size_t((b * s.heads_q + h) * s.local + i)],
                                    want.lse[std::size_t((b * s.heads_q + h) * s.total() + g)]));
          for (std::int64_t e = 0; e < s.dim; ++e) {
            const auto mine = index(b, s.local, i, s.heads_q, h, s.dim, e);
            const auto whole = index(b, s.total(), g, s.heads_q, h, s.dim, e);
            fwd = std::max(fwd, worst(out[mine], want.out[whole]));
            bwd = std::max(bwd, worst(dq[mine], want.dq[whole]));
          }
        }
        for (std::int64_t h = 0; h < s.heads_kv; ++h) {
          for (std::int64_t e = 0; e < s.dim; ++e) {
            const auto mine = index(b, s.local, i, s.heads_kv, h, s.dim, e);
            const auto whole = index(b, s.total(), g, s.heads_kv, h, s.dim, e);
            bwd = std::max(bwd, worst(dk[mine], want.dk[whole]));
            bwd = std::max(bwd, worst(dv[mine], want.dv[whole]));
          }
        }
      }
    }
  }
  double fwd_tol = kForwardTol, bwd_tol = kBackwardTol;
  if (s.out_dtype != DType::f32) {  // DESIGN.md: at most 2x a same-precision plain reference's
    const Oracle plain = whole_sequence(s, q, k, v, dout, slopes, s.out_dtype);
    fwd_tol += 2 * std::max(max_diff(plain.out, want.out), max_diff(plain.lse, want.lse));
    bwd_tol += 2 * std::max({max_diff(plain.dq, want.dq), max_diff(plain.dk, want.dk),
                             max_diff(plain.dv, want.dv)});
  }
  EXPECT_LE(fwd, fwd_tol) << "out / lse";
  EXPECT_LE(bwd, bwd_tol) << "dq / dk / dv";
}

TEST(RingAttention, MatchesTheOracleOnTheWholeSequence) {
  for (int ranks : {1, 2, 3, 4}) {
    for (RingLayout layout : {RingLayout::contiguous, RingLayout::zigzag}) {
      for (bool causal : {false, true}) {
        RingSpec s;
        s.ranks = ranks;
        s.layout = layout;
        s.causal = causal;
        s.seed = std::uint32_t(ranks * 4 + int(layout) * 2 + int(causal));
        check_ring(s);
      }
    }
  }
}

// Windows narrower than a chunk (most chunk pairs meet no key and are skipped), wider than one,
// one-sided and two-sided, with and without causal; prefix-LM whose prefix ends inside a chunk;
// ALiBi, whose distances must be global ones.
TEST(RingAttention, WindowsPrefixLmAndAlibiUseGlobalPositions) {
  struct Case {
    bool causal;
    std::int64_t left, right, prefix;
    bool alibi;
  };
  const Case cases[] = {{true, 2, -1, 0, false},  {true, 9, -1, 0, false},  {false, 3, 4, 0, false},
                        {false, -1, 2, 0, false}, {true, -1, -1, 5, false}, {true, 4, -1, 7, false},
                        {false, -1, -1, 0, true}, {true, 5, -1, 0, true}};
  int n = 0;
  for (const Case& c : cases) {
    for (int ranks : {2, 3}) {
      for (RingLayout layout : {RingLayout::contiguous, RingLayout::zigzag}) {
        RingSpec s;
        s.ranks = ranks;
        s.layout = layout;
        s.causal = c.causal;
        s.window_left = c.left;
        s.window_right = c.right;
        s.prefix_len = c.prefix;
        s.alibi = c.alibi;
        s.seed = std::uint32_t(100 + n++);
        check_ring(s);
      }
    }
  }
}

TEST(RingAttention, SoftcapBf16AndLongerShards) {
  RingSpec s;
  s.ranks = 3;
  s.softcap = 2.0f;
  s.dtype = DType::bf16;
  s.local = 40;
  s.heads_q = s.heads_kv = 2;
  s.dim = 64;
  check_ring(s);
}

// Outputs in the inputs' 16-bit dtype (each query chunk's last merge rounds into them; one rank
// writes its only calls' results straight there) and K / V shards that are strided views (held
// as copies once the ring moves them), over ring sizes 1-3 and both layouts.
TEST(RingAttention, SixteenBitOutputsAndStridedShards) {
  int n = 0;
  for (int ranks : {1, 2, 3}) {
    for (RingLayout layout : {RingLayout::contiguous, RingLayout::zigzag}) {
      for (bool strided : {false, true}) {
        RingSpec s;
        s.ranks = ranks;
        s.layout = layout;
        s.dtype = s.out_dtype = DType::bf16;
        s.strided_kv = strided;
        s.seed = std::uint32_t(200 + n++);
        check_ring(s);
      }
    }
  }
}

// Causal scores each rank computes: sum over its queries of (global position + 1).
std::int64_t causal_scores(RingLayout layout, int ranks, int rank, std::int64_t local) {
  std::int64_t n = 0;
  for (std::int64_t t = 0; t < local; ++t)
    n += ring_global_position(layout, ranks, rank, local, t) + 1;
  return n;
}

TEST(RingLayouts, ZigzagBalancesCausalWork) {
  EXPECT_EQ(ring_global_position(RingLayout::zigzag, 2, 0, 4, 2), 6);
  EXPECT_EQ(ring_global_position(RingLayout::zigzag, 2, 1, 4, 3), 5);
  EXPECT_EQ(ring_global_position(RingLayout::contiguous, 2, 1, 4, 3), 7);
  for (int ranks : {2, 4, 8}) {
    const std::int64_t first = causal_scores(RingLayout::zigzag, ranks, 0, 64);
    for (int r = 1; r < ranks; ++r)
      EXPECT_EQ(causal_scores(RingLayout::zigzag, ranks, r, 64), first);
    // Contiguous: the last rank computes (2R - 1) / (1 + 1/L) times what the first one does.
    EXPECT_GT(causal_scores(RingLayout::contiguous, ranks, ranks - 1, 64),
              (2 * ranks - 2) * causal_scores(RingLayout::contiguous, ranks, 0, 64));
  }
}

// --- errors ----------------------------------------------------------------------------------

// Runs a forward call on every rank of a 2-rank ring with `mutate(rank, args)` applied; returns
// each rank's Error argument and message.
template <class Mutate>
std::vector<std::pair<std::string, std::string>> forward_errors(Mutate mutate) {
  auto ring = make_in_process_ring(2);
  std::vector<std::pair<std::string, std::string>> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      HostTensor q(DType::f32, {1, 4, 2, 8}), k(DType::f32, {1, 4, 2, 8}),
          out(DType::f32, {1, 4, 2, 8});
      HostTensor lse(DType::f32, {1, 2, 4}), odd(DType::f32, {1, 3, 2, 8}),
          odd_out(DType::f32, {1, 3, 2, 8});
      HostTensor odd_lse(DType::f32, {1, 2, 3});
      std::mt19937 rng{unsigned(r)};
      q.fill_random(rng);
      k.fill_random(rng);
      RingAttentionArgs a;
      a.q = q;
      a.k = a.v = k;
      a.out = out;
      a.lse = lse;
      a.comm = ring[std::size_t(r)].get();
      mutate(r, a, odd, odd_out, odd_lse);
      try {
        ring_attention_forward(a);
      } catch (const Error& e) {
        errors[std::size_t(r)] = {e.argument(), e.what()};
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

TEST(RingErrors, ShardsThatDifferAcrossRanksFailOnEveryRank) {
  const auto errors = forward_errors(
      [](int r, RingAttentionArgs& a, const HostTensor&, const HostTensor&, const HostTensor&) {
        if (r == 1) a.softmax_scale = 0.5f;
      });
  for (const auto& [arg, what] : errors) {
    EXPECT_EQ(arg, "q") << what;
    EXPECT_NE(what.find("the same shard shapes, dtypes, mask, layout and scale"),
              std::string::npos);
  }
}

TEST(RingErrors, OneRanksBadCallReleasesTheOthers) {
  const auto errors = forward_errors(
      [](int r, RingAttentionArgs& a, const HostTensor&, const HostTensor&, const HostTensor&) {
        if (r == 1) a.lse = Tensor();
      });
  EXPECT_NE(errors[0].second.find("another rank's call failed"), std::string::npos)
      << errors[0].second;
  EXPECT_EQ(errors[1].first, "lse") << errors[1].second;
}

TEST(RingErrors, EachBadArgumentIsNamed) {
  auto zigzag_odd = forward_errors([](int, RingAttentionArgs& a, const HostTensor& odd,
                                      const HostTensor& odd_out, const HostTensor& odd_lse) {
    a.q = a.k = a.v = odd;
    a.out = odd_out;
    a.lse = odd_lse;
  });
  EXPECT_EQ(zigzag_odd[0].first, "q.shape[1]") << zigzag_odd[0].second;
  auto kv_len = forward_errors([](int, RingAttentionArgs& a, const HostTensor& odd,
                                  const HostTensor&, const HostTensor&) { a.k = a.v = odd; });
  EXPECT_EQ(kv_len[0].first, "k.shape[1]") << kv_len[0].second;
  auto offset = forward_errors([](int, RingAttentionArgs& a, const HostTensor&, const HostTensor&,
                                  const HostTensor&) { a.mask.diagonal_offset = 3; });
  EXPECT_EQ(offset[0].first, "mask.diagonal_offset") << offset[0].second;
  // Views labelled with a CUDA device that no machine has: refused by name before any buffer is
  // made, whether this build has no CUDA backend, has one but no GPU, or runs on a GPU machine
  // (where cuda:0 over host memory would reach a kernel).
  auto on_gpu = forward_errors([](int, RingAttentionArgs& a, const HostTensor&, const HostTensor&,
                                  const HostTensor&) {
    for (Tensor* t : {&a.q, &a.k, &a.v, &a.out, &a.lse}) {
      *t = Tensor::from_arrays(t->data(), t->dtype(), t->rank(),
                               std::vector<std::int64_t>{1, 4, 2, 8}.data(),
                               std::vector<std::int64_t>{64, 16, 8, 1}.data(), Device::cuda(99));
    }
    a.lse = Tensor(a.lse.data(), DType::f32, {1, 2, 4}, Device::cuda(99));
  });
  EXPECT_EQ(on_gpu[0].first, "q.device") << on_gpu[0].second;
  RingAttentionArgs no_comm;
  try {
    ring_attention_forward(no_comm);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "comm");
  }
}

}  // namespace
}  // namespace flashkit::testing
