// FP8 quantization, the Hadamard rotation and FP8 attention on the CPU (validated calls,
// core/fp8.cpp).
#pragma once

#include <cstdint>

#include "flashkit/fp8.hpp"

namespace flashkit::cpu {

// row (d elements, d a power of two) times the orthonormal Hadamard matrix, in place: the fast
// Walsh-Hadamard transform (d log2 d additions), then 1 / sqrt(d).
void hadamard_row(float* row, std::int64_t d);

void quantize_fp8(const QuantizeFp8Args& args);
void hadamard_transform(const HadamardArgs& args);
// x's values (e4m3 times its block's scale) into `out`, f32 of x's shape.
void dequantize_fp8(const Tensor& x, const Tensor& scale, std::int64_t block_size,
                    const Tensor& out);

}  // namespace flashkit::cpu
