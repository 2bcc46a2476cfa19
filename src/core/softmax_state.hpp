// The online-softmax state of one query row and the merge of two partial states. Written once;
// the CPU fast path, split-K decode, cascade attention and ring attention all reuse it.
//
// Scores enter in base 2: s2 = s * log2(e), so exp(s - m) becomes exp2(s2 - m2), which is one
// instruction on GPUs and one polynomial on CPUs. The state keeps the running max m (base 2) and
// the running sum l = sum exp2(s2 - m); the output accumulator o lives with the caller, which
// rescales it by the factor that absorb() returns. lse (natural log) = (m + log2(l)) * ln(2).
#pragma once

#include <cmath>
#include <limits>

#include "core/host_device.hpp"

namespace flashkit::core {

constexpr double kLog2e = 1.4426950408889634;
constexpr double kLn2 = 0.6931471805599453;

template <typename T>
struct SoftmaxState {
  T m = -std::numeric_limits<T>::infinity();
  T l = 0;

  // A new block of scores has max block_max (base 2). Updates m and returns the factor that the
  // old l and o must be multiplied by (0 when nothing was seen before: -inf - -inf is NaN).
  FLASHKIT_HD T absorb_max(T block_max) {
    return absorb_max(block_max, [](T x) { return T(exp2(x)); });
  }
  // The same with the factor from `exp2_of` (a kernel's one-instruction ex2.approx, where the
  // accurate exp2 costs ~10 instructions per row and block for its subnormal range).
  template <class Exp2>
  FLASHKIT_HD T absorb_max(T block_max, Exp2 exp2_of) {
    const T m_new = block_max > m ? block_max : m;
    const T alpha = (m == -std::numeric_limits<T>::infinity()) ? T(0) : exp2_of(m - m_new);
    m = m_new;
    return alpha;
  }

  // Natural-log log-sum-exp of everything absorbed; -inf for a row that saw no key.
  FLASHKIT_HD T lse() const {
    return l > T(0) ? (m + log2(l)) * T(kLn2) : -std::numeric_limits<T>::infinity();
  }
};

// Weights that combine two partial states over disjoint key sets:
//   o = w_a * o_a + w_b * o_b, lse = merged lse (natural log).
template <typename T>
struct MergeWeights {
  T w_a, w_b, lse;
};

template <typename T>
FLASHKIT_HD MergeWeights<T> merge_weights(T lse_a, T lse_b) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  if (lse_a == kNegInf && lse_b == kNegInf) return {T(0), T(0), kNegInf};
  const T m = lse_a > lse_b ? lse_a : lse_b;
  const T e_a = exp(lse_a - m);
  const T e_b = exp(lse_b - m);
  const T sum = e_a + e_b;
  return {e_a / sum, e_b / sum, m + log(sum)};
}

}  // namespace flashkit::core
