// `flashkit check`'s second half: the features built on attention, each on fresh random inputs
// against a slower path that computes the same thing another way: MLA decode and FP8 attention
// against their fp64 oracles, ring attention on a 2-rank in-process ring against the oracle on
// the whole sequence, and the rotary embedding against its inverse.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "check_features.hpp"
#include "flashkit/fp8.hpp"
#include "flashkit/mla.hpp"
#include "flashkit/ring.hpp"
#include "flashkit/rotary.hpp"
#include "host_array.hpp"

namespace flashkit::app {

namespace {

bool report(const std::string& name, double err, double tol) {
  const bool pass = err <= tol;  // false for NaN
  std::printf("%s cpu %-70s err %.1e (tol %.1e)\n", pass ? "PASS" : "FAIL", name.c_str(), err, tol);
  return pass;
}

// MLA decode of 8 heads over a 576-wide latent cache in pages of 16 (the pages in order).
double mla_error(std::mt19937& rng) {
  const std::int64_t width = 576, latent = 512, pages = 24;
  HostArray q(DType::bf16, {2, 1, 8, width}), cache(DType::bf16, {pages, 16, width});
  HostArray table(DType::i32, {2, 12}), lens(DType::i32, {2});
  q.fill_random(rng);
  cache.fill_random(rng);
  for (std::int64_t i = 0; i < 24; ++i) table.set(i, double(i));
  lens.set(0, 150.0);
  lens.set(1, 37.0);
  HostArray out(DType::f32, {2, 1, 8, latent}), want(DType::f64, {2, 1, 8, latent});
  out.poison();
  MlaDecodeArgs a;
  a.q = q.view();
  a.cache.pages = cache.view();
  a.cache.block_table = table.view();
  a.cache.seq_lens = lens.view();
  a.latent_dim = latent;
  a.softmax_scale = 1.0f / std::sqrt(192.0f);
  a.out = want.view();
  a.algo = Algo::reference;
  mla_decode(a);
  a.out = out.view();
  a.algo = Algo::automatic;
  mla_decode(a);
  return max_abs_diff(out, want);
}

// FP8 attention (q, k, v quantized with the Hadamard rotation, blocks of 32) against the oracle
// on the same codes.
double fp8_error(std::mt19937& rng) {
  std::vector<HostArray> codes, scales;
  for (std::int64_t heads : {4, 2, 2}) {
    HostArray x(DType::bf16, {1, 100, heads, 64});
    x.fill_random(rng);
    codes.emplace_back(DType::e4m3, x.shape());
    scales.emplace_back(DType::f32, std::vector<std::int64_t>{1, heads, 4});
    quantize_fp8({x.view(), codes.back().view(), scales.back().view(), 32, true, nullptr});
  }
  HostArray out(DType::f32, {1, 100, 4, 64}), want(DType::f64, {1, 100, 4, 64});
  out.poison();
  Fp8AttentionArgs a;
  a.q = codes[0].view();
  a.k = codes[1].view();
  a.v = codes[2].view();
  a.q_scale = scales[0].view();
  a.k_scale = scales[1].view();
  a.v_scale = scales[2].view();
  a.block_size = 32;
  a.rotated = true;
  a.mask.causal = true;
  a.out = want.view();
  a.algo = Algo::reference;
  attention_forward_fp8(a);
  a.out = out.view();
  a.algo = Algo::automatic;
  attention_forward_fp8(a);
  return max_abs_diff(out, want);
}

// Causal ring attention of 2 ranks (zigzag, 2 x 48 tokens) against attention_forward's oracle
// on all 96; each rank's rows compared at their global positions.
double ring_error(std::mt19937& rng) {
  constexpr int kRanks = 2;
  constexpr std::int64_t kLocal = 48, kTotal = kRanks * kLocal;
  HostArray q(DType::f32, {1, kTotal, 2, 32}), k(DType::f32, {1, kTotal, 2, 32});
  HostArray v(DType::f32, {1, kTotal, 2, 32}), want(DType::f64, {1, kTotal, 2, 32});
  q.fill_random(rng);
  k.fill_random(rng);
  v.fill_random(rng);
  AttentionArgs whole;
  whole.q = q.view();
  whole.k = k.view();
  whole.v = v.view();
  whole.mask.causal = true;
  whole.out = want.view();
  whole.algo = Algo::reference;
  attention_forward(whole);

  auto ring = make_in_process_ring(kRanks);
  std::vector<double> errors(kRanks, NAN);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      HostArray qs(DType::f32, {1, kLocal, 2, 32}), ks(DType::f32, {1, kLocal, 2, 32});
      HostArray vs(DType::f32, {1, kLocal, 2, 32}), out(DType::f32, {1, kLocal, 2, 32});
      HostArray lse(DType::f32, {1, 2, kLocal});
      for (std::int64_t t = 0; t < kLocal; ++t) {
        const std::int64_t g = ring_global_position(RingLayout::zigzag, kRanks, r, kLocal, t);
        for (std::int64_t e = 0; e < 64; ++e) {
          qs.set(t * 64 + e, q.at(g * 64 + e));
          ks.set(t * 64 + e, k.at(g * 64 + e));
          vs.set(t * 64 + e, v.at(g * 64 + e));
        }
      }
      out.poison();
      RingAttentionArgs a;
      a.q = qs.view();
      a.k = ks.view();
      a.v = vs.view();
      a.mask.causal = true;
      a.comm = ring[std::size_t(r)].get();
      a.out = out.view();
      a.lse = lse.view();
      ring_attention_forward(a);
      double worst = 0.0;
      for (std::int64_t t = 0; t < kLocal; ++t) {
        const std::int64_t g = ring_global_position(RingLayout::zigzag, kRanks, r, kLocal, t);
        for (std::int64_t e = 0; e < 64; ++e) {
          worst = std::max(worst, std::fabs(out.at(t * 64 + e) - want.at(g * 64 + e)));
        }
      }
      errors[std::size_t(r)] = worst;
    });
  }
  for (auto& t : threads) t.join();
  return std::max(errors[0], errors[1]);
}

// The rotary embedding (interleaved, positions from offsets) and then its conjugate: x again.
double rotary_error(std::mt19937& rng) {
  HostArray x(DType::f32, {2, 20, 4, 64}), y(DType::f32, {2, 20, 4, 64});
  HostArray table(DType::f32, {64, 32}), offsets(DType::i32, {2});
  x.fill_random(rng);
  for (std::int64_t p = 0; p < 64; ++p) {
    for (std::int64_t i = 0; i < 32; ++i)
      table.set(p * 32 + i, double(p) * std::pow(1e4, -i / 32.0));
  }
  HostArray cos_t(DType::f32, {64, 32}), sin_t(DType::f32, {64, 32});
  for (std::int64_t i = 0; i < table.numel(); ++i) {
    cos_t.set(i, std::cos(table.at(i)));
    sin_t.set(i, std::sin(table.at(i)));
  }
  offsets.set(0, 3.0);
  offsets.set(1, 40.0);
  y.poison();
  RotaryArgs a;
  a.x = x.view();
  a.out = y.view();
  a.cos = cos_t.view();
  a.sin = sin_t.view();
  a.seqlen_offsets = offsets.view();
  a.interleaved = true;
  apply_rotary(a);
  a.x = y.view();
  a.conjugate = true;
  apply_rotary(a);  // in place
  return max_abs_diff(y, x);
}

}  // namespace

int run_feature_checks(std::mt19937& rng) {
  int failures = 0;
  // fp32 paths against fp64 over a few hundred products of O(1) values: ~1e-6.
  failures += !report("MLA decode, bf16 latent cache, 8 heads, 576 / 512, pages of 16",
                      mla_error(rng), 2e-5);
  failures += !report("FP8 attention, Hadamard-rotated e4m3, blocks of 32, causal, GQA 4/2",
                      fp8_error(rng), 2e-5);
  failures += !report("ring attention, 2 ranks in process, zigzag, causal", ring_error(rng), 2e-5);
  failures += !report("rotary embedding, interleaved, offsets, then its conjugate in place",
                      rotary_error(rng), 2e-6);
  return failures;
}

}  // namespace flashkit::app
