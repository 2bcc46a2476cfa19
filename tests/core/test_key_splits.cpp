// core::key_splits, the split rule of the CUDA fp32 forward: no split once the tasks fill two
// waves, otherwise enough for two waves; core::one_wave_key_splits, the paged decode plan's: as
// many parts as one wave of `slots` per processor holds. Both capped by the keys each part must
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

TEST(OneWaveKeySplits, FillEveryProcessorWithoutASecondWave) {
  // BENCH.md's decode shapes on 132 SMs, 8 KV heads, 2 CTAs per SM (264 slots).
  EXPECT_EQ(one_wave_key_splits(8, 132, 2, 32768, 256, 64), 33);  // batch 1: 264 CTAs
  EXPECT_EQ(one_wave_key_splits(64, 132, 2, 8192, 256, 64), 4);   // batch 8: 256, not 320
  EXPECT_EQ(one_wave_key_splits(128, 132, 2, 8192, 256, 64), 2);  // batch 16: 256, not 384
  EXPECT_EQ(one_wave_key_splits(256, 132, 2, 4096, 256, 64), 1);  // batch 32: 256 tasks fill it
  EXPECT_EQ(one_wave_key_splits(8, 132, 4, 32768, 256, 64), 64);  // 4 slots: 66, capped at 64
  EXPECT_EQ(one_wave_key_splits(1000, 132, 2, 4096, 256, 64), 1);
}

TEST(OneWaveKeySplits, CappedByKeysAndPartsAndNeverZero) {
  EXPECT_EQ(one_wave_key_splits(8, 132, 2, 1024, 256, 64), 4);   // 1024 / 256 keys
  EXPECT_EQ(one_wave_key_splits(8, 132, 2, 200, 256, 64), 1);    // too few keys for two parts
  EXPECT_EQ(one_wave_key_splits(1, 2, 2, 1 << 20, 256, 64), 4);  // one task on two CPU threads
  EXPECT_EQ(one_wave_key_splits(0, 132, 2, 4096, 256, 64), 1);   // nothing to run
}

}  // namespace
}  // namespace flashkit::core
