// The score rules of flashkit::Mask for one (query, key) pair, as the CPU oracle applies them
// (softcap first, then the ALiBi bias), for kernels that evaluate scores one by one: the lineage
// kernels everywhere, FA2 only on blocks that cross a mask edge.
#pragma once

#include <cstdint>

#include "core/mask_rules.hpp"
#include "cuda/common/fwd_params.hpp"

namespace flashkit::cuda {

// Key j is in the sequence and the mask lets query row `diag` (= i + diagonal shift) see it.
__device__ __forceinline__ bool key_is_visible(const core::MaskRule& rule, std::int64_t diag,
                                               std::int64_t j, std::int64_t len_k) {
  return j < len_k && core::key_visible(rule, diag, j, len_k);
}

// The natural-log score of a visible pair from its raw dot product q.k, and d score / d (q.k)
// (the backward's chain factor: scale, times 1 - tanh^2 under a softcap; ALiBi adds a constant).
struct Score {
  float value;
  float grad;
};

__device__ __forceinline__ Score score_and_grad(const FwdParams& p, float dot, float slope,
                                                std::int64_t diag, std::int64_t j) {
  Score r{p.scale * dot, p.scale};
  if (p.mask.softcap > 0.0f) {
    const float t = tanhf(r.value / p.mask.softcap);
    r.value = p.mask.softcap * t;
    r.grad *= 1.0f - t * t;
  }
  if (p.alibi_slopes != nullptr) r.value += core::alibi_bias(slope, diag, j);
  return r;
}

__device__ __forceinline__ float score_of(const FwdParams& p, float dot, float slope,
                                          std::int64_t diag, std::int64_t j) {
  return score_and_grad(p, dot, slope, diag, j).value;
}

}  // namespace flashkit::cuda
