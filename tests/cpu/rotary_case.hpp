// One apply_rotary test case: random x, real rotation tables (cos / sin of p * 10000^(-2k/r)),
// positions given one of the ways RotaryArgs takes them, and the expected output computed in
// double from the definition (not from flashkit's code).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flashkit/rotary.hpp"
#include "host_tensor.hpp"

namespace flashkit::testing {

enum class RotaryPositionKind {
  index,             // token i at i
  offsets,           // seqlen_offsets[b] + i
  ids,               // position_ids, random
  one_per_sequence,  // position_ids with a stride of 0 over tokens (packed: not available)
};

struct RotarySpec {
  DType dtype = DType::f32;        // of x and out
  DType table_dtype = DType::f32;  // of cos and sin
  std::int64_t batch = 3, seqlen = 5, heads = 2, head_dim = 16, rotary_dim = 16;
  bool packed = false;
  std::vector<std::int64_t> lens{2, 0, 5};  // packed sequence lengths (batch of them)
  std::int64_t extra_rows = 2;              // packed rows past the last sequence (not written)
  RotaryPositionKind positions = RotaryPositionKind::index;
  bool interleaved = false, conjugate = false;
  std::int64_t max_positions = 40;
  std::uint32_t seed = 1;

  std::string name() const;
};

struct RotaryCase {
  RotarySpec spec;
  HostTensor x, cos, sin, seqlen_offsets, position_ids, cu_seqlens;
  Tensor position_ids_view;  // position_ids, or its stride-0 view
  std::vector<std::int64_t>
      row_pos;  // position of each [row] (packed row or b * seqlen + i); -1: none

  std::vector<std::int64_t> shape() const;  // of x and out
  RotaryArgs args(const Tensor& out) const;
  // Logical order of x. Rows in no sequence hold `unwritten` (what the output held before).
  std::vector<double> expected(const std::vector<double>& unwritten) const;
};
RotaryCase make_rotary_case(const RotarySpec& spec);

// max |got - want| / (eps(dtype) * |want| + 1e-6) over the elements: <= 1 means every element is
// within the rounding of out's dtype (eps: 2^-23 f32, 2^-11 f16, 2^-8 bf16) of the exact value.
double rounding_units(const std::vector<double>& got, const std::vector<double>& want, DType dtype);

}  // namespace flashkit::testing
