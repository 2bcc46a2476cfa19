// The swizzled shared-memory layout (ptx/swizzle.hpp), proven on the host for every tile shape
// the sm80 kernels use: a bijection, conflict-free for ldmatrix row reads and for the copy
// loop's 16-byte stores, and the address splits the fragment loaders and the copy loop rely on.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "cuda/ptx/swizzle.hpp"

namespace flashkit::testing {
namespace {

// The 4-byte banks a 16-byte unit covers are determined by its slot in a 128-byte line; 8
// accesses of 16 bytes (one ldmatrix phase or a quarter warp of stores) are conflict-free when
// their slots differ.
int slot(int byte_offset) {
  return (byte_offset / 16) % 8;
}

template <int kRows, int kUnits>
void check_tile() {
  using Tile = cuda::ptx::SwizzledTile<kRows, kUnits>;
  SCOPED_TRACE(::testing::Message() << kRows << " rows x " << kUnits << " units");
  std::vector<int> seen(kRows * kUnits, 0);
  for (int r = 0; r < kRows; ++r) {
    for (int u = 0; u < kUnits; ++u) {
      const int p = Tile::unit_offset(r, u);
      ASSERT_GE(p, 0);
      ASSERT_LT(p, kRows * kUnits);
      ++seen[p];
    }
  }
  for (int p = 0; p < kRows * kUnits; ++p) ASSERT_EQ(seen[p], 1) << "physical unit " << p;

  for (int r0 = 0; r0 < kRows; r0 += 8) {
    for (int u = 0; u < kUnits; ++u) {
      std::set<int> slots;
      for (int k = 0; k < 8; ++k) slots.insert(slot(Tile::byte_offset(r0 + k, u)));
      EXPECT_EQ(slots.size(), 8u) << "ldmatrix rows " << r0 << ".. unit " << u;
    }
  }
  for (int p0 = 0; p0 < kRows * kUnits; p0 += 8) {
    std::set<int> slots;
    for (int p = p0; p < p0 + 8; ++p) {
      int r, u;
      Tile::copy_order(p, r, u);
      slots.insert(slot(Tile::byte_offset(r, u)));
    }
    EXPECT_EQ(slots.size(), 8u) << "copy order " << p0 << "..";
  }
  for (int r0 = 0; r0 < kRows; r0 += 16) {
    for (int r = 0; r < 16; ++r) {
      for (int u = 0; u < kUnits; ++u) {
        ASSERT_EQ(Tile::byte_offset(r0 + r, u),
                  Tile::fixed_offset(r0, u) + (Tile::lane_offset(r) ^ Tile::unit_xor(u)))
            << "row " << r0 + r << " unit " << u;
      }
    }
  }
  // The copy loop's split (sm80/smem_copy.cuh): rows r0 + r of strip s at this thread's row r
  // and unit u of the strip, for every r below the tile's end.
  constexpr int kS = Tile::kStripUnits;
  for (int r0 = 0; r0 < kRows; r0 += 16) {
    for (int r = 0; r0 + r < kRows; ++r) {
      for (int s = 0; s < kUnits / kS; ++s) {
        for (int u = 0; u < kS; ++u) {
          ASSERT_EQ(Tile::byte_offset(r0 + r, s * kS + u),
                    Tile::fixed_offset(r0, s * kS) + Tile::byte_offset(r, u))
              << "row " << r0 + r << " strip " << s << " unit " << u;
        }
      }
    }
  }
}

// run_base's identity (swizzle.hpp) for every run the P^T / dS^T stores take: 8-unit strips,
// runs of 4 or 8 units, any 128-byte aligned tile base.
template <int kRows, int kUnits>
void check_runs() {
  using Tile = cuda::ptx::SwizzledTile<kRows, kUnits>;
  static_assert(Tile::kStripUnits == 8, "runs are proven for 8-unit strips");
  SCOPED_TRACE(::testing::Message() << kRows << " rows x " << kUnits << " units");
  for (const int run : {4, 8})
    for (const int base : {0, 128, 0x10000 + 384})
      for (int row0 = 0; row0 < kRows; row0 += 16)
        for (int u0 = 0; u0 < kUnits; u0 += run)
          for (int m = 0; 16 * (row0 / 16 + m) < kRows; ++m)
            for (int h = 0; h < 2; ++h)
              for (int r = 0; r < 8; ++r)
                for (int j = 0; j < run; ++j)
                  for (int b = 0; b < 16; b += 4) {
                    const int want =
                        base + Tile::byte_offset(row0 + 16 * m + 8 * h + r, u0 + j) + b;
                    const int got = ((base + Tile::run_base(row0, u0, r, b)) ^ (16 * j)) +
                                    m * Tile::kRows16Bytes + h * Tile::kRows8Bytes;
                    ASSERT_EQ(got, want) << "row0 " << row0 << " u0 " << u0 << " m " << m << " h "
                                         << h << " r " << r << " j " << j << " byte " << b;
                  }
}

TEST(Swizzle, StoreRunsAddressFromOneRegister) {
  // P^T / dS^T tiles: block_n x block_m / 8 units.
  check_runs<128, 8>();
  check_runs<128, 16>();
  check_runs<64, 8>();
}

TEST(Swizzle, EveryHeadDimTileIsBijectiveConflictFreeAndSplitsItsAddress) {
  // Units per row = head dim / 8: d = 32, 64, 96, 128, 192, 256.
  check_tile<64, 4>();
  check_tile<128, 4>();
  check_tile<64, 8>();
  check_tile<128, 8>();
  check_tile<64, 12>();
  check_tile<128, 12>();
  check_tile<64, 16>();
  check_tile<128, 16>();
  check_tile<64, 24>();
  check_tile<128, 24>();
  check_tile<64, 32>();
  check_tile<128, 32>();
}

}  // namespace
}  // namespace flashkit::testing
