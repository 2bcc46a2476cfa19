// Rotary position embedding (RoPE): each pair of a row's first rotary_dim elements is rotated by
// the angle of the token's position,
//   y1 = x1 cos - x2 sin,   y2 = x1 sin + x2 cos   (cos, sin of position p, pair i),
// in fp32 and rounded to out's dtype; elements past rotary_dim are copied. The pairs are
// (i, i + rotary_dim / 2) (GPT-NeoX, Llama) or, interleaved, (2i, 2i + 1) (GPT-J). It is how
// queries and keys get their positions before attention, and MLA's decoupled rotary part.
#pragma once

#include <cstdint>

#include "flashkit/tensor.hpp"

namespace flashkit {

struct RotaryArgs {
  // [batch, seqlen, heads, d], or packed [total, heads, d] with cu_seqlens (i32 [batch + 1]).
  // f32, f16 or bf16; out has x's shape and may be x itself (in place).
  Tensor x, out;
  Tensor cu_seqlens;
  // [max_positions, rotary_dim / 2], f32 or x's dtype: row p holds the cos / sin of position p for
  // each pair. rotary_dim <= d.
  Tensor cos, sin;
  // Where each token is, at most one of:
  //   seqlen_offsets i32 [batch]: token i of sequence b at seqlen_offsets[b] + i (a cache's
  //                  length before the new tokens);
  //   position_ids   i32 [batch, seqlen] ([total] packed): each token's own position, any
  //                  strides (a stride of 0 puts every token of a sequence at one position);
  //   neither:       token i at position i.
  // Host positions are checked against max_positions; on a GPU a position out of range makes
  // its row NaN instead of reading past cos / sin.
  Tensor seqlen_offsets, position_ids;
  bool interleaved = false;
  bool conjugate = false;  // rotate by -angle: the inverse, and the gradient of the rotation
  void* stream = nullptr;
};

void apply_rotary(const RotaryArgs& args);

}  // namespace flashkit
