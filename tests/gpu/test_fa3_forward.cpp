// The sm90 (Hopper) forward on the GPU against the fp64 oracle, on the same grid as the sm80
// kernel (tests/gpu/support/forward_cases.hpp) over its head dims: dtypes x masks x GQA ratios,
// packed varlen batches (tiles that cross a sequence's end take the register-store epilogue),
// seqlen_q != seqlen_k both ways, f32 output, padded strides, long sequences that cycle the
// pipeline's stages many times, bitwise repeatability, and automatic picking it. Off sm 9.0 the
// kernel must be refused by name.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "attention_case.hpp"
#include "device_tensor.hpp"
#include "expect_error.hpp"
#include "forward_cases.hpp"
#include "gpu_forward.hpp"
#include "offset_cases.hpp"

namespace flashkit::testing {
namespace {

constexpr int kHeadDims[] = {64, 128, 256};

bool device_is_sm90() {
  cudaDeviceProp prop{};
  return cudaGetDeviceProperties(&prop, 0) == cudaSuccess && prop.major == 9 && prop.minor == 0;
}

#define FLASHKIT_REQUIRE_SM90() \
  if (!device_is_sm90()) GTEST_SKIP() << "the sm90 forward runs on compute capability 9.0 only"

class Fa3Grid : public ::testing::TestWithParam<GridParam> {};

TEST_P(Fa3Grid, MatchesOracle) {
  FLASHKIT_REQUIRE_SM90();
  expect_gpu_forward_matches(grid_case(GetParam()), Algo::fa3);
}

INSTANTIATE_TEST_SUITE_P(All, Fa3Grid,
                         ::testing::Combine(::testing::Values(DType::f16, DType::bf16),
                                            ::testing::ValuesIn(kHeadDims),
                                            ::testing::ValuesIn(kAllMasks),
                                            ::testing::Values(1, 4, 8)),
                         grid_name);

class Fa3Varlen : public ::testing::TestWithParam<VarlenParam> {};

TEST_P(Fa3Varlen, MatchesOracle) {
  FLASHKIT_REQUIRE_SM90();
  expect_gpu_forward_matches(varlen_case(GetParam()), Algo::fa3);
}

INSTANTIATE_TEST_SUITE_P(All, Fa3Varlen,
                         ::testing::Combine(::testing::Values(DType::f16, DType::bf16),
                                            ::testing::ValuesIn(kHeadDims),
                                            ::testing::ValuesIn(kAllMasks)),
                         varlen_name);

TEST(Fa3Forward, MoreQueriesThanKeysBothAlignments) {
  FLASHKIT_REQUIRE_SM90();
  for (CausalAlign align : {CausalAlign::top_left, CausalAlign::bottom_right}) {
    expect_gpu_forward_matches(more_queries_than_keys_case(align, 128), Algo::fa3);
  }
}

TEST(Fa3Forward, DiagonalOffsetsMoveEveryMask) {
  for (int d : kHeadDims) {
    for (const CaseSpec& s : diagonal_offset_cases(d == 128 ? DType::f16 : DType::bf16, d)) {
      SCOPED_TRACE(s.name());
      expect_gpu_forward_matches(s, Algo::fa3);
    }
  }
}

TEST(Fa3Forward, F32OutputTakesTheRegisterEpilogue) {
  FLASHKIT_REQUIRE_SM90();
  for (DType dtype : {DType::f16, DType::bf16}) {
    expect_gpu_forward_matches(square_case(dtype, 190, 64, true), Algo::fa3, DType::f32);
  }
}

TEST(Fa3Forward, PaddedRowStrides) {
  FLASHKIT_REQUIRE_SM90();
  for (bool varlen : {false, true}) {
    expect_gpu_forward_matches(padded_rows_case(varlen, 128), Algo::fa3, DType::f16);
  }
}

// 2048 keys are 16 blocks of 128 (26 of 80 at d = 256): each of the two stages is refilled
// many times, so a wrong barrier parity shows up as stale K or V.
TEST(Fa3Forward, LongSequencesCycleThePipeline) {
  FLASHKIT_REQUIRE_SM90();
  for (int d : kHeadDims) {
    CaseSpec s;
    s.dtype = DType::bf16;
    s.seqlens_q = {2048};
    s.seqlens_k = {2048};
    s.heads_q = 1;
    s.heads_kv = 1;
    s.head_dim = d;
    expect_gpu_forward_matches(s, Algo::fa3);
    s.causal = true;
    expect_gpu_forward_matches(s, Algo::fa3);
    s.causal = false;
    s.window_left = 300;
    s.window_right = 200;
    s.prefix_len = 100;
    expect_gpu_forward_matches(s, Algo::fa3);
  }
}

// At d >= 128 a row's running max moves only when a block's max exceeds it by more than 8 (base
// 2; sm80/fwd_softmax.cuh, kStaleMaxSlack), so O and l keep their reference point and the
// probabilities reach up to 2^8. KV blocks run last first: scaling the first 64 keys up makes
// the scores of a row's last block jump, by less than the slack (probabilities above 1), around
// it, and far past it (O rescaled at the end of the row rather than at its start). Every shape
// that holds the max: d = 128 in 128-key blocks (1024 keys) and in 176-key blocks (8200 keys,
// no mask), d = 256.
void expect_held_max_matches(CaseSpec s) {
  for (const double gain : {3.0, 8.0, 20.0})
    for (const DType dtype : {DType::f16, DType::bf16}) {
      s.dtype = dtype;
      CaseData c = make_case(s);
      std::vector<double> k = c.k.values();  // [1, keys, heads_kv, d]
      const std::int64_t row = s.heads_kv * s.head_dim;
      for (std::int64_t i = 0; i < 64 * row; ++i) k[std::size_t(i)] *= gain;
      c.k.set_values(k);
      SCOPED_TRACE(::testing::Message()
                   << "d " << s.head_dim << ", " << s.seqlens_k[0] << " keys, causal " << s.causal
                   << ", first 64 keys x " << gain);
      expect_gpu_forward_matches(c, Algo::fa3, dtype);
    }
}

TEST(Fa3Forward, HeldMaxAgainstScoresThatJumpOnTheLastBlock) {
  FLASHKIT_REQUIRE_SM90();
  for (const int head_dim : {128, 256})
    for (const bool causal : {false, true})
      expect_held_max_matches(square_case(DType::bf16, 1024, head_dim, causal));
  CaseSpec s;
  s.seqlens_q = {300};
  s.seqlens_k = {8200};
  s.heads_q = 4;
  s.heads_kv = 1;
  s.head_dim = 128;
  expect_held_max_matches(s);
}

// A masked d = 64 call of `rows` query and key rows (one sequence, causal, then a window), and
// a varlen batch whose second sequence has `varlen_rows`: the tile walk of whichever shape
// fwd_shape gives those lengths.
void expect_d64_masked_calls_match(std::int64_t rows, std::int64_t varlen_rows) {
  CaseSpec s;
  s.dtype = DType::bf16;
  s.seqlens_q = s.seqlens_k = {rows};
  s.heads_q = 2;
  s.heads_kv = 1;
  s.head_dim = 64;
  s.causal = true;
  expect_gpu_forward_matches(s, Algo::fa3);
  s.causal = false;
  s.window_left = 700;
  s.window_right = 90;
  expect_gpu_forward_matches(s, Algo::fa3);
  s.window_left = s.window_right = -1;
  s.causal = true;
  s.dtype = DType::f16;
  s.heads_q = 1;
  s.varlen = true;
  s.seqlens_q = s.seqlens_k = {333, varlen_rows, 0, 191};
  expect_gpu_forward_matches(s, Algo::fa3);
}

// d = 64 runs 192-row tiles (3 consumer warpgroups) without a mask, and under a causal or window
// mask from 8192 query rows on (64-row tiles below, which the grid covers): masked tiles of 192
// rows that are not a multiple of 128 blocks, a last tile of 4 rows, and a varlen batch whose
// tiles cross sequence ends.
TEST(Fa3Forward, D64MaskedLongQueriesTakeThe192RowTiles) {
  FLASHKIT_REQUIRE_SM90();
  expect_d64_masked_calls_match(8260, 8193);  // 43 x 192 + 4 rows, 64 x 128 + 68 keys
}

// Below 8192 query rows a masked d = 64 call walks 64-row tiles, three streams to a CTA: long
// persistent walks over a causal diagonal and a window, a last tile of 4 rows and a last block
// of 4 keys, and a varlen batch whose tiles cross sequence ends.
TEST(Fa3Forward, D64MaskedMidQueriesWalkThreeStreams) {
  FLASHKIT_REQUIRE_SM90();
  expect_d64_masked_calls_match(4228, 4097);  // 66 x 64 + 4 rows, 33 x 128 + 4 keys
}

// d = 128 runs 176-key blocks from 8192 keys on (128 below, which the grid covers): a last block
// of 104 keys, causal and window masks crossing 176-key blocks, and a varlen batch whose blocks
// cross sequence ends.
TEST(Fa3Forward, D128LongKeysTakeThe176KeyBlocks) {
  FLASHKIT_REQUIRE_SM90();
  CaseSpec s;
  s.dtype = DType::bf16;
  s.seqlens_q = {300};
  s.seqlens_k = {8200};
  s.heads_q = 4;
  s.heads_kv = 1;
  s.head_dim = 128;
  expect_gpu_forward_matches(s, Algo::fa3);
  s.causal = true;
  expect_gpu_forward_matches(s, Algo::fa3);
  s.causal = false;
  s.window_left = 500;
  s.window_right = 40;
  s.prefix_len = 30;
  expect_gpu_forward_matches(s, Algo::fa3);
  s.window_left = s.window_right = -1;
  s.prefix_len = 0;
  s.dtype = DType::f16;
  s.heads_q = 1;
  s.varlen = true;
  s.seqlens_q = {70, 17, 0, 130};
  s.seqlens_k = {8300, 17, 5, 191};
  expect_gpu_forward_matches(s, Algo::fa3);
}

// Out of one run, bit for bit.
std::vector<double> run_out(const CaseData& c, Algo algo) {
  HostTensor out(c.spec.dtype, c.out_shape());
  const DeviceCase dev(c);
  DeviceTensor d_out(out);
  d_out.poison();
  attention_forward(dev.forward_args(c, d_out.view(), Tensor(), algo));
  expect_device_ok();
  d_out.copy_to(out);
  return out.values();
}

// Without varlen, more work units than CTAs (160-320 here at d = 128, against the H200's 132; at
// d = 64, below 2048 keys or under a mask, 400-640 against three walkers per SM: 396) run on
// persistent CTAs of one to four tiles each: both Q buffers are reused and the pipeline's stages
// and phases carry over from tile to tile (odd and even block counts per tile). Without a mask
// a unit is a tile (d = 64 takes the one-consumer shape there); under a mask the pair of
// tiles m and last - m, with the middle tile of an odd count alone, tiles of no visible key
// (more queries than keys, bottom-right aligned) and windows. The f32 output takes the register
// epilogue, which releases Q without a store.
TEST(Fa3Forward, PersistentCtasWalkSeveralTiles) {
  FLASHKIT_REQUIRE_SM90();
  CaseSpec s;
  s.dtype = DType::bf16;
  s.seqlens_q = std::vector<std::int64_t>(8, 600);
  s.seqlens_k = std::vector<std::int64_t>(8, 520);
  s.heads_q = 8;
  s.heads_kv = 2;
  s.head_dim = 128;
  expect_gpu_forward_matches(s, Algo::fa3);
  s.head_dim = 64;
  s.seqlens_k = std::vector<std::int64_t>(8, 700);
  expect_gpu_forward_matches(s, Algo::fa3);
  s.seqlens_q = std::vector<std::int64_t>(2, 100);  // 1-128 query rows: 128-row tiles
  s.seqlens_k = std::vector<std::int64_t>(2, 3000);
  expect_gpu_forward_matches(s, Algo::fa3);
  // 8 tiles x 5 heads x 10 = 400 units over 396 walkers (132 SMs): the three walks of a CTA
  // (FwdCta) whose walkers are 3, 4 and 5 take 2, 1 and 1 tiles, so one walk runs on after the
  // others end; the last tile of each sequence has 2 rows; f32 output takes the register
  // epilogue.
  s.heads_q = s.heads_kv = 5;
  s.seqlens_q = std::vector<std::int64_t>(10, 450);
  s.seqlens_k = std::vector<std::int64_t>(10, 400);
  expect_gpu_forward_matches(s, Algo::fa3);
  expect_gpu_forward_matches(s, Algo::fa3, DType::f32);
  s.heads_q = 8;
  s.heads_kv = 2;

  s.dtype = DType::f16;
  s.head_dim = 128;
  s.seqlens_q = std::vector<std::int64_t>(12, 300);
  s.seqlens_k = std::vector<std::int64_t>(12, 200);
  s.heads_kv = 8;
  s.softcap = 20.0f;
  s.alibi = true;
  expect_gpu_forward_matches(s, Algo::fa3, DType::f32);
  s.softcap = 0.0f;
  s.alibi = false;

  s.causal = true;
  s.heads_kv = 2;
  s.seqlens_q = s.seqlens_k = std::vector<std::int64_t>(10, 300);
  expect_gpu_forward_matches(s, Algo::fa3);
  const CaseData c = make_case(s);
  EXPECT_EQ(run_out(c, Algo::fa3), run_out(c, Algo::fa3));

  s.dtype = DType::bf16;
  s.head_dim = 64;
  s.heads_kv = 1;
  // 13 tiles of 64 rows: 7 units a (sequence, head), the middle tile alone (its pair's second
  // is empty); 448 units, more than the three-stream walk's 396 walkers, so it is persistent.
  s.seqlens_q = std::vector<std::int64_t>(8, 830);
  s.seqlens_k = std::vector<std::int64_t>(8, 300);
  expect_gpu_forward_matches(s, Algo::fa3);

  s.causal = false;
  s.head_dim = 128;
  s.heads_kv = 4;
  s.window_left = 200;
  s.window_right = 50;
  s.prefix_len = 30;
  s.seqlens_q = s.seqlens_k = std::vector<std::int64_t>(6, 900);
  expect_gpu_forward_matches(s, Algo::fa3);
}

// d = 256 walks persistently at short keys (fwd_one_q_walk_pays) with its one Q buffer, which the
// consumers release after each tile's last S, and O staged over the V stages, or from registers
// for f32 output (FwdTraits::kWalkReleasesQAfterS), in both of its block shapes (fwd_shape: 64
// keys at <= 512, or <= 1024 under a mask; 80 above): more units than the H200's 132 walkers
// (160-192 here), tiles of one block (the release after the first S), of several with a last
// block of 52 or 60 keys, f32 output, causal pairs with a middle tile alone, and tiles of no
// visible key (more queries than keys, bottom-right aligned: the release without a mainloop). Out
// bit for bit on a repeat.
TEST(Fa3Forward, D256WalksWithOneQBuffer) {
  FLASHKIT_REQUIRE_SM90();
  CaseSpec s;
  s.dtype = DType::bf16;
  s.heads_q = 4;
  s.heads_kv = 2;
  s.head_dim = 256;
  s.seqlens_q = std::vector<std::int64_t>(8, 600);  // 5 tiles, the last of 88 rows
  s.seqlens_k = std::vector<std::int64_t>(8, 500);  // 7 x 64 + 52 keys
  expect_gpu_forward_matches(s, Algo::fa3);
  expect_gpu_forward_matches(s, Algo::fa3, DType::f32);
  s.seqlens_k = std::vector<std::int64_t>(8, 60);  // one block a tile
  expect_gpu_forward_matches(s, Algo::fa3);

  s.dtype = DType::f16;
  s.causal = true;
  s.seqlens_q = s.seqlens_k = std::vector<std::int64_t>(8, 1100);  // 80-key blocks: 13 x 80 + 60
  expect_gpu_forward_matches(s, Algo::fa3);
  s.seqlens_q = s.seqlens_k = std::vector<std::int64_t>(20, 300);  // pairs (0, 2) and (1)
  expect_gpu_forward_matches(s, Algo::fa3);
  s.heads_kv = 1;
  s.seqlens_q = std::vector<std::int64_t>(10, 830);  // 7 tiles, the first 4 without a key
  s.seqlens_k = std::vector<std::int64_t>(10, 300);
  expect_gpu_forward_matches(s, Algo::fa3);
  const CaseData c = make_case(s);
  EXPECT_EQ(run_out(c, Algo::fa3), run_out(c, Algo::fa3));
}

TEST(Fa3Forward, RepeatsBitForBitAndIsWhatAutomaticRuns) {
  FLASHKIT_REQUIRE_SM90();
  CaseSpec s;
  s.dtype = DType::bf16;
  s.seqlens_q = {700};
  s.seqlens_k = {900};
  s.heads_q = 4;
  s.heads_kv = 1;
  s.head_dim = 128;
  s.causal = true;
  const CaseData c = make_case(s);
  const std::vector<double> first = run_out(c, Algo::fa3);
  EXPECT_EQ(first, run_out(c, Algo::fa3));
  EXPECT_EQ(first, run_out(c, Algo::automatic));
}

TEST(Fa3Forward, OutsideItsLimitsIsRefusedByName) {
  const auto refused = [](CaseSpec s, const std::string& argument) {
    const CaseData c = make_case(s);
    HostTensor out(s.dtype, c.out_shape());
    const DeviceCase dev(c);
    DeviceTensor d_out(out);
    expect_error([&] { attention_forward(dev.forward_args(c, d_out.view(), Tensor(), Algo::fa3)); },
                 argument);
  };
  CaseSpec s;
  s.dtype = DType::bf16;
  s.seqlens_q = {40};
  s.seqlens_k = {40};
  s.head_dim = 64;
  if (!device_is_sm90()) {
    refused(s, "q.device");
    return;
  }
  s.head_dim = 96;  // compiled for sm80 only
  refused(s, "q.shape[-1]");
  s.head_dim = 64;
  s.dtype = DType::f32;  // tensor cores would round it; fa1 keeps f32
  refused(s, "q.dtype");
}

}  // namespace
}  // namespace flashkit::testing
