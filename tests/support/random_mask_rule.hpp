// Random mask rules for the host proofs of block skipping (kv_block_range, query_block_range):
// causal either alignment, windows of 0..150 or unbounded, prefix-LM of 0..300 keys, the diagonal
// moved by -200..200 (ring attention's chunk pairs) in a third of them.
#pragma once

#include <random>
#include <sstream>
#include <string>

#include "core/mask_rules.hpp"

namespace flashkit::testing {

inline int pick(std::mt19937& rng, int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

inline core::MaskRule random_mask_rule(std::mt19937& rng) {
  core::MaskRule rule;
  rule.causal = pick(rng, 0, 1) == 1;
  rule.bottom_right = pick(rng, 0, 1) == 1;
  rule.window_left = pick(rng, 0, 2) == 0 ? -1 : pick(rng, 0, 150);
  rule.window_right = pick(rng, 0, 2) == 0 ? -1 : pick(rng, 0, 150);
  rule.prefix_len = pick(rng, 0, 2) == 0 ? pick(rng, 0, 300) : 0;
  rule.diagonal_offset = pick(rng, 0, 2) == 0 ? pick(rng, -200, 200) : 0;
  return rule;
}

inline std::string describe(const core::MaskRule& rule, std::int64_t len_q, std::int64_t len_k) {
  std::ostringstream s;
  s << "causal " << rule.causal << " br " << rule.bottom_right << " window " << rule.window_left
    << "," << rule.window_right << " prefix " << rule.prefix_len << " offset "
    << rule.diagonal_offset << " len " << len_q << "x" << len_k;
  return s.str();
}

}  // namespace flashkit::testing
