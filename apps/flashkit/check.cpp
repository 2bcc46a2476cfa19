// `flashkit check`: a few seconds of self-test on the machine at hand — every algorithm of every
// device the command can drive, against the fp64 oracle (Algo::reference), on fresh random inputs
// and outputs poisoned with NaN, over masks, dtypes, GQA and varlen; then the features built on
// attention (check_features.cpp).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "check_features.hpp"
#include "commands.hpp"
#include "flashkit/attention.hpp"
#include "flashkit/info.hpp"
#include "format.hpp"
#include "host_array.hpp"

namespace flashkit::app {

namespace {

struct CheckCase {
  std::string name;
  DType dtype;
  std::vector<std::int64_t> seqlens_q, seqlens_k;  // one per sequence
  bool varlen;
  std::int64_t heads_q, heads_kv, head_dim;
  Mask mask;  // alibi_slopes is filled in when `alibi` is set
  bool alibi;
};

std::vector<CheckCase> cases() {
  std::vector<CheckCase> all;
  all.push_back({"f32, plain", DType::f32, {128, 128}, {128, 128}, false, 4, 4, 64, {}, false});
  Mask causal;
  causal.causal = true;
  all.push_back({"f16, causal, GQA 4/2, Nq 100 < Nk 160",
                 DType::f16,
                 {100},
                 {160},
                 false,
                 4,
                 2,
                 64,
                 causal,
                 false});
  Mask shaped;
  shaped.window_left = 32;
  shaped.window_right = 8;
  shaped.softcap = 30.0f;
  all.push_back({"bf16, window 32/8, softcap, ALiBi, d 128",
                 DType::bf16,
                 {96},
                 {96},
                 false,
                 2,
                 2,
                 128,
                 shaped,
                 true});
  Mask prefix;
  prefix.causal = true;
  prefix.align = CausalAlign::top_left;
  prefix.prefix_len = 20;
  all.push_back({"f32, varlen, causal top-left, prefix-LM, MQA, an empty KV",
                 DType::f32,
                 {37, 64, 5},
                 {50, 64, 0},
                 true,
                 4,
                 1,
                 32,
                 prefix,
                 false});
  return all;
}

// Largest error vs the fp64 oracle, after rounding to the output dtype, of an fp32 path.
double tolerance(DType dtype) {
  switch (dtype) {
    case DType::f16:
      return 2e-3;
    case DType::bf16:
      return 1.6e-2;
    default:
      return 2e-5;
  }
}
constexpr double kLseTolerance = 1e-3;

std::int64_t sum(const std::vector<std::int64_t>& v) {
  std::int64_t s = 0;
  for (const std::int64_t x : v) s += x;
  return s;
}

std::int64_t max_of(const std::vector<std::int64_t>& v) {
  std::int64_t m = 0;
  for (const std::int64_t x : v) m = std::max(m, x);
  return m;
}

// The inputs of one case and the tensors that describe its problem.
struct CaseInputs {
  HostArray q, k, v, cu_q, cu_k, slopes;
  std::int64_t batch, max_q, max_k;

  CaseInputs(const CheckCase& c, std::mt19937& rng)
      : q(c.dtype, shape(c, c.seqlens_q, c.heads_q)),
        k(c.dtype, shape(c, c.seqlens_k, c.heads_kv)),
        v(c.dtype, shape(c, c.seqlens_k, c.heads_kv)),
        cu_q(offsets(c.seqlens_q)),
        cu_k(offsets(c.seqlens_k)),
        slopes(DType::f32, {c.heads_q}),
        batch(std::int64_t(c.seqlens_q.size())),
        max_q(max_of(c.seqlens_q)),
        max_k(max_of(c.seqlens_k)) {
    q.fill_random(rng);
    k.fill_random(rng);
    v.fill_random(rng);
    // ALiBi's geometric slopes 2^(-8 (h + 1) / heads).
    for (std::int64_t h = 0; h < c.heads_q; ++h) {
      slopes.set(h, std::exp2(-8.0 * double(h + 1) / double(c.heads_q)));
    }
  }

  static std::vector<std::int64_t> shape(const CheckCase& c, const std::vector<std::int64_t>& lens,
                                         std::int64_t heads) {
    if (c.varlen) return {sum(lens), heads, c.head_dim};
    return {std::int64_t(lens.size()), lens.front(), heads, c.head_dim};
  }

  static HostArray offsets(const std::vector<std::int64_t>& lens) {
    HostArray cu(DType::i32, {std::int64_t(lens.size()) + 1});
    auto* p = static_cast<std::int32_t*>(cu.data());
    p[0] = 0;
    for (std::size_t i = 0; i < lens.size(); ++i) p[i + 1] = p[i] + std::int32_t(lens[i]);
    return cu;
  }

  std::vector<std::int64_t> lse_shape(const CheckCase& c) const {
    if (c.varlen) return {c.heads_q, sum(c.seqlens_q)};
    return {batch, c.heads_q, max_q};
  }

  AttentionArgs args(const CheckCase& c, const HostArray& out, const HostArray& lse,
                     Algo algo) const {
    AttentionArgs a;
    a.q = q.view();
    a.k = k.view();
    a.v = v.view();
    a.out = out.view();
    a.lse = lse.view();
    a.mask = c.mask;
    if (c.alibi) a.mask.alibi_slopes = slopes.view();
    if (c.varlen) {
      a.varlen.cu_seqlens_q = cu_q.view();
      a.varlen.cu_seqlens_k = cu_k.view();
      a.varlen.max_seqlen_q = max_q;
      a.varlen.max_seqlen_k = max_k;
    }
    a.algo = algo;
    return a;
  }
};

// -inf where the oracle has -inf (a query that saw no key), else within tolerance.
double lse_error(const HostArray& got, const HostArray& oracle) {
  double worst = 0.0;
  for (std::int64_t i = 0; i < got.numel(); ++i) {
    const double g = got.at(i), o = oracle.at(i);
    if (std::isinf(o) || std::isinf(g)) {
      if (g != o) return std::numeric_limits<double>::infinity();
      continue;
    }
    const double diff = std::fabs(g - o);
    if (std::isnan(diff)) return diff;
    worst = std::max(worst, diff);
  }
  return worst;
}

// Runs one algorithm on one case; prints its line and returns whether it passed.
bool check_one(const CheckCase& c, const CaseInputs& in, Algo algo) {
  const std::vector<std::int64_t> out_shape = in.q.shape();  // d_v = d in every case
  HostArray out(c.dtype, out_shape), lse(DType::f32, in.lse_shape(c));
  HostArray want(DType::f64, out_shape), want_lse(DType::f32, in.lse_shape(c));
  out.poison();
  lse.poison();
  attention_forward(in.args(c, want, want_lse, Algo::reference));
  attention_forward(in.args(c, out, lse, algo));
  const double err = max_abs_diff(out, want), lse_err = lse_error(lse, want_lse);
  const double tol = tolerance(c.dtype);
  const bool pass = err <= tol && lse_err <= kLseTolerance;  // false for NaN
  std::printf("%s cpu %-5s %-58s out %.1e (tol %.1e), lse %.1e\n", pass ? "PASS" : "FAIL",
              algo_name(algo), c.name.c_str(), err, tol, lse_err);
  return pass;
}

}  // namespace

int run_check() {
  const std::uint32_t seed = std::random_device{}();  // fresh inputs on every run
  std::mt19937 rng(seed);
  int failures = 0;
  for (const CheckCase& c : cases()) {
    const CaseInputs in(c, rng);
    for (const Algo algo : {Algo::naive, Algo::fa2}) {
      if (!check_one(c, in, algo)) ++failures;
    }
  }
  failures += run_feature_checks(rng);
  for (const DeviceInfo& d : devices()) {
    if (d.backend != "cpu") {
      std::printf("SKIP %s: the flashkit command cannot drive %s memory yet\n", d.name.c_str(),
                  d.backend.c_str());
    }
  }
  if (failures > 0) {
    std::printf("%d check(s) FAILED (random seed %u)\n", failures, seed);
    return 1;
  }
  std::printf("all checks passed\n");
  return 0;
}

}  // namespace flashkit::app
