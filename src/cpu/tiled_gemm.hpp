// The register-blocked fp32 micro-kernel of the tiled CPU path and the small GEMM driver around
// it. Every product of the forward (S = K Q^T, O += P V) and of the backward (dP, dV, dK, dQ) is
// one call of gemm_tile on packed tiles.
//
// The micro-kernel computes an 8 x 32 block of C over the full depth: per depth step it loads
// 32 floats of B (two AVX-512 vectors), broadcasts 8 values of A, and issues 16 FMAs into 16
// accumulators that live in registers (GCC -O3 -march=native turns the fixed-size loops below
// into exactly that; checked in the assembly). 16 FMAs per 10 loads keeps both FMA ports fed.
#pragma once

#include <cstdint>

#include "cpu/tiled_math.hpp"

namespace flashkit::cpu::tiled {

constexpr std::int64_t kMicroRows = 8;
constexpr std::int64_t kMicroCols = 32;

// A is read as a[row * row_stride + k * depth_stride], so a transposed operand (P^T stored
// [keys][queries] but used as P) costs nothing: the 8 broadcasts of a step are then adjacent.
struct MatA {
  const float* data;
  std::int64_t row_stride, depth_stride;
};
// B and C are row-major with leading dimension ld (a multiple of kMicroCols for aligned rows).
struct MatB {
  const float* data;
  std::int64_t ld;
};
struct MatC {
  float* data;
  std::int64_t ld;
};

// Internal linkage for the code below, as in tiled_math.hpp: one copy per translation unit,
// built for that unit's ISA.
namespace {

// C[8][32] (+)= A[8][depth] * B[depth][32]. Kept out of line: inlined into a large caller
// (the backward's loop body) GCC stops keeping acc in registers and runs the FMAs scalar from
// memory, 5x slower; on its own it always compiles to the 16-register form.
template <bool kAccumulate>
[[gnu::noinline]] void micro_kernel(const float* __restrict__ a, std::int64_t a_row,
                                    std::int64_t a_depth, const float* __restrict__ b,
                                    std::int64_t ldb, std::int64_t depth, float* __restrict__ c,
                                    std::int64_t ldc) {
  float acc[kMicroRows][kMicroCols];
  for (std::int64_t r = 0; r < kMicroRows; ++r) {
    for (std::int64_t j = 0; j < kMicroCols; ++j) acc[r][j] = kAccumulate ? c[r * ldc + j] : 0.0f;
  }
  for (std::int64_t k = 0; k < depth; ++k) {
    const float* b_row = b + k * ldb;
    const float* a_col = a + k * a_depth;
#pragma GCC unroll 8
    for (std::int64_t r = 0; r < kMicroRows; ++r) {
      const float a_value = a_col[r * a_row];
      for (std::int64_t j = 0; j < kMicroCols; ++j) acc[r][j] = fmadd(a_value, b_row[j], acc[r][j]);
    }
  }
  for (std::int64_t r = 0; r < kMicroRows; ++r) {
    for (std::int64_t j = 0; j < kMicroCols; ++j) c[r * ldc + j] = acc[r][j];
  }
}

// C[rows][cols] (+)= A[rows][depth] * B[depth][cols]; rows a multiple of 8, cols of 32 (callers
// zero-pad their tiles). Column strips outside, row blocks inside: one 32-wide strip of B
// (depth * 128 bytes, 16 KiB at depth 128) stays in L1 while every row block streams past it.
template <bool kAccumulate>
inline void gemm_tile(std::int64_t rows, std::int64_t cols, std::int64_t depth, MatA a, MatB b,
                      MatC c) {
  for (std::int64_t j = 0; j < cols; j += kMicroCols) {
    for (std::int64_t r = 0; r < rows; r += kMicroRows) {
      micro_kernel<kAccumulate>(a.data + r * a.row_stride, a.row_stride, a.depth_stride, b.data + j,
                                b.ld, depth, c.data + r * c.ld + j, c.ld);
    }
  }
}

}  // namespace

}  // namespace flashkit::cpu::tiled
