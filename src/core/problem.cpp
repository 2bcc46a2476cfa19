#include "core/problem.hpp"

namespace flashkit::core {

TokenLayout token_layout(const Tensor& t, bool varlen) {
  if (varlen) return {0, t.stride(0), t.stride(1)};
  return {t.stride(0), t.stride(1), t.stride(2)};
}

TokenLayout lse_layout(const Tensor& lse, bool varlen) {
  // lse is [batch, heads, tokens] or [heads, total]: tokens are the last dim.
  if (varlen) return {0, lse.stride(1), lse.stride(0)};
  return {lse.stride(0), lse.stride(2), lse.stride(1)};
}

}  // namespace flashkit::core
