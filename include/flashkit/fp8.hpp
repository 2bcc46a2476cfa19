// FP8 attention with block scaling and Hadamard "incoherent processing".
//
// quantize_fp8 turns q, k or v into e4m3 with one f32 scale per block of block_size tokens and
// head (scale = the block's max |x| / 448, so the block uses e4m3's whole range). Its 3 mantissa
// bits cost ~2^-5 relative error per element, and one large channel (an "outlier", common in
// keys) forces a large scale on its block, leaving the other channels few bits. With hadamard,
// each row is first multiplied by the orthonormal Hadamard matrix H of order d (H = H^T,
// H H = I), which spreads every channel over all of them: the block's max shrinks towards its
// typical size and the error with it. Rotating q and k alike leaves q k^T unchanged
// ((q H)(k H)^T = q k^T); rotating v rotates the output, which attention_forward_fp8 undoes.
#pragma once

#include <cstdint>
#include <optional>

#include "flashkit/attention.hpp"
#include "flashkit/tensor.hpp"

namespace flashkit {

struct QuantizeFp8Args {
  Tensor x;      // [batch, seqlen, heads, d]: f32, f16 or bf16
  Tensor out;    // e4m3, x's shape
  Tensor scale;  // f32 [batch, heads, ceil(seqlen / block_size)]: x ~ stored * scale
  std::int64_t block_size = 128;  // tokens per scale
  bool hadamard = false;          // rotate each row by H first (d a power of two)
  void* stream = nullptr;
};

// y = x H along the head dim (rows of d, a power of two, elements, scaled by 1 / sqrt(d) so that
// H is orthonormal); y may be x. Applying it twice gives x back.
struct HadamardArgs {
  Tensor x, out;  // [batch, seqlen, heads, d]: f32, f16 or bf16 (out also f64)
  void* stream = nullptr;
};

struct Fp8AttentionArgs {
  // e4m3 [batch, seqlen, heads, d] from quantize_fp8, each with its scale and the same
  // block_size; GQA as in attention_forward (k and v with heads_kv heads).
  Tensor q, k, v;
  Tensor q_scale, k_scale, v_scale;
  std::int64_t block_size = 128;
  // q, k and v were all quantized with hadamard = true: out is rotated back (out = o' H).
  bool rotated = false;
  std::optional<float> softmax_scale;  // default 1/sqrt(d)
  Mask mask;
  Tensor out;                   // [batch, seqlen_q, heads_q, d_v]: f32, f16, bf16 or f64
  Tensor lse;                   // optional, as in attention_forward
  Algo algo = Algo::automatic;  // automatic (fp32 tiles) or reference (fp64) on dequantized values
  void* stream = nullptr;
};

// CPU backend; CUDA tensors get a flashkit::Error naming x.device / q.device (the sm90 FP8
// kernel is not written yet).
void quantize_fp8(const QuantizeFp8Args& args);
void hadamard_transform(const HadamardArgs& args);
void attention_forward_fp8(const Fp8AttentionArgs& args);

}  // namespace flashkit
