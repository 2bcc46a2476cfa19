// The register-blocked fp32 micro-kernel of the tiled CPU path and the small GEMM driver around
// it. Every product of the forward (S = K Q^T, O += P V) and of the backward (dP, dV, dK, dQ) is
// one call of gemm_tile on packed tiles.
//
// The micro-kernel computes a kMicroRows x kMicroCols block of C over the full depth: per depth
// step it loads one row of B (two vectors), broadcasts kMicroRows values of A, and issues
// 2 kMicroRows FMAs into accumulators that live in registers (GCC -O3 -march=native turns the
// fixed-size loops below into exactly that; checked in the assembly). The block is as large as
// the ISA's vector registers hold beside B's two vectors and a broadcast:
//  - AVX-512, 32 registers of 16 floats: 8 x 32, 16 accumulators; 16 FMAs per 10 loads keeps
//    both FMA ports fed;
//  - AVX / AVX2, 16 registers of 8 floats: 4 x 16, 8 accumulators, as many FMAs as two ports
//    with a 4-cycle latency keep in flight. 8 x 32 there needs 32 accumulator registers, and GCC
//    kept half of them on the stack (docs/kernels/cpu_tiled.md, step 5);
//  - SSE (portable builds): 8 x 32 still. GCC vectorises a 4 x 8 block across the depth instead
//    of the columns (scalar loads and shuffles), 3.5x slower than the 8 x 32 block it replaces.
// Callers pad their tiles to these multiples, so the block changes no result: each element's
// products are summed in the same order whatever the block.
#pragma once

#include <cstdint>

#include "cpu/tiled_math.hpp"

namespace flashkit::cpu::tiled {

#if defined(__AVX__) && !defined(__AVX512F__)
constexpr std::int64_t kMicroRows = 4;
constexpr std::int64_t kMicroCols = 16;
#else
constexpr std::int64_t kMicroRows = 8;
constexpr std::int64_t kMicroCols = 32;
#endif

// A is read as a[row * row_stride + k * depth_stride], so a transposed operand (P^T stored
// [keys][queries] but used as P) costs nothing: the broadcasts of a step are then adjacent.
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

// C[kMicroRows][kMicroCols] (+)= A[kMicroRows][depth] * B[depth][kMicroCols]. Kept out of line:
// inlined into a large caller (the backward's loop body) GCC stops keeping acc in registers and
// runs the FMAs scalar from memory, 5x slower; on its own it compiles to the register form.
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

// C[rows][cols] (+)= A[rows][depth] * B[depth][cols]; rows a multiple of kMicroRows, cols of
// kMicroCols (callers zero-pad their tiles). Column strips outside, row blocks inside: one strip
// of B (depth * kMicroCols floats, 16 KiB at depth 128 with AVX-512) stays in L1 while every row
// block streams past it.
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
