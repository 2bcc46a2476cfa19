// core::key_splits, the split rule of the paged decode plan and the CUDA fp32 forward: no split
// once the tasks fill two waves, otherwise enough for two waves, capped by the keys each part must
// keep and by the most parts.
#include <gtest/gtest.h>

#include "core/key_splits.hpp"

namespace flashkit::core {
namespace {

TEST(KeySplits, NoneWhenTheTasksFillTwoWaves) {
  EXPECT_EQ(key_splits(264, 132, 1 << 20, 128, 16), 1);
  EXPECT_EQ(key_splits(1000, 132, 1 << 20, 128, 16), 1);
  EXPECT_EQ(key_splits(0, 132, 1 << 20, 128, 16), 1);  // nothing to run
}

TEST(KeySplits, EnoughForTwoWavesWithinTheCaps) {
  EXPECT_EQ(key_splits(16, 132, 1024, 128, 16), 8);      // one head at N = 1024: 1024 / 128 keys
  EXPECT_EQ(key_splits(16, 132, 1 << 20, 128, 16), 16);  // ceil(264 / 16) = 17, capped at 16
  EXPECT_EQ(key_splits(64, 132, 1 << 20, 128, 16), 5);   // ceil(264 / 64)
  EXPECT_EQ(key_splits(8, 132, 32768, 256, 64), 33);     // decode batch 1, 8 KV heads, 32k keys
  EXPECT_EQ(key_splits(8, 132, 200, 256, 64), 1);        // too few keys for two parts
}

}  // namespace
}  // namespace flashkit::core
