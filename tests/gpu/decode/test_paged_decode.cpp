// The CUDA paged decode kernels (CUDA cores v1/v2, tensor cores v3; one split or split-K)
// against the CPU oracle (paged_attention with Algo::reference on the same host tensors): page
// sizes, GQA groups,
// KV dtypes, query counts, head dims, masks and score modifiers, packed and strided tensors,
// automatic splits, CUDA-graph capture, and the errors raised before any launch.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "decode_case.hpp"
#include "device_tensor.hpp"
#include "flashkit/flashkit.hpp"

namespace flashkit::testing {
namespace {

// Heads 2 * group / 2, d 128; sequences of q_len (the shortest possible), 45 and 300 tokens
// (1 is among them for q_len 1; 45 and 300 end mid-page for every page size but 1).
DecodeSpec spec_of(DType kv, std::int64_t page_size, std::int64_t group, std::int64_t q_len) {
  DecodeSpec s;
  s.kv_dtype = kv;
  s.q_dtype = s.out_dtype = kv == DType::e4m3 ? DType::bf16 : kv;
  s.page_size = page_size;
  s.heads_kv = 2;
  s.heads_q = 2 * group;
  s.seq_lens = {q_len, 45, 300};
  s.q_lens = {q_len, q_len, q_len};
  s.seed = std::uint32_t(page_size * 131 + group * 17 + q_len * 3 + int(kv));
  return s;
}

// Every split count against the oracle, and the split runs against the unsplit one.
void expect_matches(const DecodeSpec& spec, const std::vector<int>& splits) {
  SCOPED_TRACE(spec.name());
  const DecodeCase c = make_decode_case(spec);
  const DecodeResult want = decode_oracle(c);
  const double v_max = *std::max_element(spec.v_amplitudes.begin(), spec.v_amplitudes.end());
  std::vector<DecodeResult> runs;
  for (int s : splits) {
    SCOPED_TRACE("num_splits " + std::to_string(s));
    runs.push_back(run_decode_gpu(c, s));
    EXPECT_EQ("", compare_decode(runs.back(), want, spec.out_dtype, v_max));
    if (runs.size() > 1) {
      EXPECT_EQ("", compare_decode(runs.back(), runs.front(), spec.out_dtype, v_max))
          << "vs unsplit";
    }
  }
}

TEST(PagedDecode, MatchesOracleOverPageSizesGroupsDtypesAndQueries) {
  for (DType kv : {DType::bf16, DType::f16, DType::e4m3}) {
    for (std::int64_t page : {1, 16, 64, 256}) {
      for (std::int64_t group : {1, 4, 8}) {
        for (std::int64_t q_len : {1, 3}) expect_matches(spec_of(kv, page, group, q_len), {1, 3});
      }
    }
  }
}

TEST(PagedDecode, HeadDims64And256) {
  for (std::int64_t d : {64, 256}) {
    for (DType kv : {DType::bf16, DType::f16, DType::e4m3}) {
      for (std::int64_t group : {4, 8}) {
        for (std::int64_t q_len : {1, 3}) {
          DecodeSpec s = spec_of(kv, 16, group, q_len);
          s.head_dim = d;
          expect_matches(s, {1, 4});
        }
      }
    }
  }
}

TEST(PagedDecode, MasksAndScoreModifiers) {
  const std::vector<std::function<void(DecodeSpec&)>> masks = {
      [](DecodeSpec& s) { s.window_left = 20; },  // sliding window, causal
      [](DecodeSpec& s) {                         // both sides, not causal: earlier queries
        s.causal = false;                         // see a key past their diagonal
        s.window_left = 50;
        s.window_right = 1;
      },
      [](DecodeSpec& s) {  // prefix-LM: a hidden gap between the prefix and the window
        s.window_left = 10;
        s.prefix_len = 29;
      },
      [](DecodeSpec& s) {  // scale 1 pushes scores to |s| ~ 4, where tanh bends
        s.softcap = 2.5f;
        s.softmax_scale = 1.0f;
      },
      [](DecodeSpec& s) { s.alibi = true; },
  };
  for (const auto& mask : masks) {
    for (DType kv : {DType::bf16, DType::e4m3}) {
      for (std::int64_t q_len : {1, 3}) {
        DecodeSpec s = spec_of(kv, 16, 4, q_len);
        mask(s);
        expect_matches(s, {1, 4});
      }
    }
  }
}

TEST(PagedDecode, PackedQueriesOfDifferentCounts) {
  for (DType kv : {DType::bf16, DType::e4m3}) {
    for (bool padded : {false, true}) {
      DecodeSpec s = spec_of(kv, 16, 4, 1);
      s.packed = true;
      s.padded = padded;
      s.seq_lens = {5, 45, 300, 2};
      s.q_lens = {1, 3, 2, 2};
      expect_matches(s, {1, 3});
    }
  }
}

TEST(PagedDecode, StridedPagesQueriesAndOutputs) {
  for (DType kv : {DType::bf16, DType::e4m3}) {
    DecodeSpec s = spec_of(kv, 16, 4, 3);
    s.padded = true;
    expect_matches(s, {1, 2});
  }
}

// Thousands of keys per sequence: many steps per warp and the ring's refills, the plan's split
// count (0), more splits than a short sequence has steps (empty splits), pages of 256.
TEST(PagedDecode, LongSequencesAndAutomaticSplits) {
  for (DType kv : {DType::bf16, DType::e4m3}) {
    for (std::int64_t page : {16, 256}) {
      DecodeSpec s = spec_of(kv, page, 4, 1);
      s.seq_lens = {4100, 1, 2500};
      expect_matches(s, {1, 0, 64});
    }
  }
}

// The split merge loads 4 elements per lane from a 16-byte aligned workspace and one otherwise:
// a workspace starting one f32 into its buffer takes the second path, with few splits (3) and
// many (33), and gives what the aligned one does.
TEST(PagedDecode, UnalignedWorkspaceMergesAlike) {
  DecodeSpec s = spec_of(DType::bf16, 16, 4, 1);
  s.seq_lens = {4100, 1, 2500};
  const DecodeCase c = make_decode_case(s);
  const DecodeResult want = decode_oracle(c);
  for (int splits : {3, 33}) {
    SCOPED_TRACE("num_splits " + std::to_string(splits));
    const DecodeResult aligned = run_decode_gpu(c, splits);
    const DecodeResult unaligned = run_decode_gpu(c, splits, 1);
    EXPECT_EQ("", compare_decode(aligned, want, s.out_dtype));
    EXPECT_EQ("", compare_decode(unaligned, want, s.out_dtype));
    EXPECT_EQ(aligned.out, unaligned.out);  // the same fold in the same order
    EXPECT_EQ(aligned.lse, unaligned.lse);
  }
}

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

// Sets FLASHKIT_DECODE_KERNEL for one scope (the kernel choice is read on every call).
class KernelChoice : public ScopedEnv {
 public:
  explicit KernelChoice(const char* kernel) : ScopedEnv("FLASHKIT_DECODE_KERNEL", kernel) {}
};

// The tests above run the default choice (tensor cores for d 64 and 128, mostly 4 warps on
// their small grids); here each kernel by name: the CUDA-core v2, and v3 with 2, 3, 4 and 8 warps.
TEST(PagedDecode, EveryKernelMatchesOracle) {
  for (const char* kernel : {"cuda_cores", "mma2", "mma3", "mma4", "mma8"}) {
    SCOPED_TRACE(kernel);
    const KernelChoice choice(kernel);
    for (DType kv : {DType::bf16, DType::f16, DType::e4m3}) {
      for (std::int64_t page : {1, 4, 16, 256}) {
        for (std::int64_t group : {1, 4, 8}) {
          for (std::int64_t q_len : {1, 3}) {
            expect_matches(spec_of(kv, page, group, q_len), {1, 3});
          }
        }
      }
      for (std::int64_t d : {64, 256}) {
        DecodeSpec s = spec_of(kv, 16, 8, 3);
        s.head_dim = d;
        expect_matches(s, {1, 4});
      }
      DecodeSpec long_seqs = spec_of(kv, 16, 4, 1);
      long_seqs.seq_lens = {4100, 1, 2500};
      expect_matches(long_seqs, {1, 0, 64});
      DecodeSpec masked = spec_of(kv, 16, 4, 3);
      masked.window_left = 20;
      masked.alibi = true;
      expect_matches(masked, {1, 4});
    }
    for (DType out : {DType::f32, DType::f16}) {
      DecodeSpec s = spec_of(DType::bf16, 16, 4, 3);
      s.out_dtype = out;
      expect_matches(s, {1, 3});
    }
  }
}

bool all_nan(const std::vector<double>& v) {
  return std::all_of(v.begin(), v.end(), [](double x) { return std::isnan(x); });
}

// Two key splits whose CTAs fit one wave run each task as one 8-warp CTA (its halves merged in
// shared memory): the workspace stays as poisoned as it was given. Where the device's shared
// memory per CTA cannot hold that CTA (FLASHKIT_SMEM_LIMIT_KB=163, an A100's, below its 192 KB
// of ring; 120 for e4m3 at d 128, whose 2 stages take 132 KB), and with three splits, the splits
// write the workspace and the split merge combines them. Every run matches the oracle.
TEST(PagedDecode, TwoSplitsInOneWaveRunAsOneEightWarpCta) {
  for (DType kv : {DType::bf16, DType::e4m3}) {
    for (std::int64_t d : {64, 128}) {
      DecodeSpec spec = spec_of(kv, 16, 4, 1);
      spec.head_dim = d;
      spec.seq_lens = {1, 45, 4100};
      SCOPED_TRACE(spec.name());
      const DecodeCase c = make_decode_case(spec);
      const DecodeResult want = decode_oracle(c);
      std::vector<double> ws;
      EXPECT_EQ("", compare_decode(run_decode_gpu(c, 2, 0, &ws), want, spec.out_dtype, 1.0));
      EXPECT_TRUE(!ws.empty() && all_nan(ws)) << "2 splits went through the workspace";
      EXPECT_EQ("", compare_decode(run_decode_gpu(c, 3, 0, &ws), want, spec.out_dtype, 1.0));
      EXPECT_FALSE(all_nan(ws)) << "3 splits left the workspace untouched";
      const char* limit_kb = kv == DType::e4m3 && d == 128 ? "120" : "163";
      const ScopedEnv small_smem("FLASHKIT_SMEM_LIMIT_KB", limit_kb);
      EXPECT_EQ("", compare_decode(run_decode_gpu(c, 2, 0, &ws), want, spec.out_dtype, 1.0));
      EXPECT_FALSE(all_nan(ws)) << "2 splits of a " << limit_kb
                                << " KB device left the workspace untouched";
    }
  }
}

// e4m3 pages of small values (scales ~1e-6 .. 5e-6 at 1e-4): the tensor-core kernels keep the
// probabilities fed to the f16 P V mma, p * scale / reference, in f16's normal range, so the
// error stays relative to the values (folding the bare scale into p lost 2-30 % of them in f16's
// subnormals). Mixed sizes raise the warp's reference mid-sequence. Every kernel, bf16 and f32
// outputs (the f32 bound is the tight one).
TEST(PagedDecode, SmallValuePagesKeepTheirPrecision) {
  const std::vector<std::vector<double>> amplitudes = {{1e-3}, {1e-4}, {1e-4, 1.0, 1e-2}};
  for (const char* kernel : {"cuda_cores", "mma2", "mma4", "mma8"}) {
    SCOPED_TRACE(kernel);
    const KernelChoice choice(kernel);
    for (const std::vector<double>& v_amplitudes : amplitudes) {
      for (DType out : {DType::bf16, DType::f32}) {
        for (std::int64_t page : {4, 16}) {
          DecodeSpec s = spec_of(DType::e4m3, page, 4, 3);
          s.seq_lens = {3, 300, 2500};
          s.out_dtype = out;
          s.v_amplitudes = v_amplitudes;
          expect_matches(s, {1, 3});
        }
      }
    }
  }
}

// bf16 queries beyond f16's range (65504) against e4m3 pages, whose tensor-core products take f16
// operands: q enters them scaled down by a power of two, and the scores take it back (without
// it, q overflows to inf and the output is NaN). The scale keeps the scores ~4, so that the
// softmax is not a tie-prone argmax.
TEST(PagedDecode, QueriesBeyondF16RangeOnE4m3Pages) {
  for (const char* kernel : {"cuda_cores", "mma2", "mma4", "mma8"}) {
    SCOPED_TRACE(kernel);
    const KernelChoice choice(kernel);
    for (double q_amplitude : {1e5, 3e7}) {
      DecodeSpec s = spec_of(DType::e4m3, 16, 4, 3);
      s.q_amplitude = q_amplitude;
      s.softmax_scale = float(1.0 / q_amplitude);
      expect_matches(s, {1, 3});
    }
  }
}

TEST(PagedDecode, OutputDtypes) {
  for (DType out : {DType::f32, DType::f16}) {
    DecodeSpec s = spec_of(DType::bf16, 16, 4, 3);
    s.out_dtype = out;
    expect_matches(s, {1, 3});
  }
}

// Fixed workspace, no allocation, no synchronisation: the split call records into a graph, and
// replaying the graph computes what the oracle does.
TEST(PagedDecode, SplitCallIsCapturedInACudaGraph) {
  DecodeSpec s = spec_of(DType::bf16, 16, 4, 1);
  s.seq_lens = {700, 33, 1200};
  const DecodeCase c = make_decode_case(s);
  const DecodeResult want = decode_oracle(c);
  const DeviceDecodeCase dev(c);
  HostTensor out(s.out_dtype, c.out_shape()), lse(DType::f32, c.lse_shape());
  HostTensor ws(DType::f32, {decode_workspace_elems(c, 4)});
  DeviceTensor d_out(out), d_lse(lse), d_ws(ws);
  d_out.poison();
  d_lse.poison();
  d_ws.poison();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  PagedAttentionArgs a = dev.args(c, d_out.view(), d_lse.view(), 4, d_ws.view());
  a.stream = stream;
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  std::string error;
  try {
    paged_attention(a);
  } catch (const std::exception& e) {
    error = e.what();
  }
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  ASSERT_EQ(error, "");
  ASSERT_EQ(ended, cudaSuccess) << cudaGetErrorString(ended);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int replay = 0; replay < 2; ++replay) {
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  }
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  d_out.copy_to(out);
  d_lse.copy_to(lse);
  EXPECT_EQ("", compare_decode({out.values(), lse.values()}, want, s.out_dtype));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  expect_device_ok();
}

// Runs `mutate` on the device call of a small case, expects flashkit::Error about `argument`,
// and checks the poisoned output was never written.
void expect_rejected(const DecodeSpec& spec, int num_splits, std::int64_t workspace_elems,
                     const std::string& argument,
                     const std::function<void(PagedAttentionArgs&)>& mutate) {
  SCOPED_TRACE("expecting an error about " + argument);
  const DecodeCase c = make_decode_case(spec);
  const DeviceDecodeCase dev(c);
  HostTensor out(spec.out_dtype, c.out_shape()), lse(DType::f32, c.lse_shape());
  DeviceTensor d_out(out), d_lse(lse), d_ws;
  HostTensor ws;
  if (workspace_elems > 0) {
    ws = HostTensor(DType::f32, {workspace_elems});
    d_ws = DeviceTensor(ws);
  }
  d_out.poison();
  PagedAttentionArgs a = dev.args(c, d_out.view(), d_lse.view(), num_splits, d_ws.view());
  mutate(a);
  try {
    paged_attention(a);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), argument) << e.what();
  }
  expect_device_ok();
  d_out.copy_to(out);
  for (double x : out.values()) ASSERT_TRUE(std::isnan(x)) << "the output was written";
}

TEST(PagedDecode, UnsupportedCallsAreRejectedBeforeAnyLaunch) {
  const auto none = [](PagedAttentionArgs&) {};
  DecodeSpec d96 = spec_of(DType::bf16, 16, 4, 1);
  d96.head_dim = 96;
  expect_rejected(d96, 1, 0, "q.shape[-1]", none);

  DecodeSpec f32 = spec_of(DType::f32, 16, 4, 1);
  expect_rejected(f32, 1, 0, "kv.k_pages.dtype", none);

  DecodeSpec f64_out = spec_of(DType::bf16, 16, 4, 1);
  f64_out.out_dtype = DType::f64;
  expect_rejected(f64_out, 1, 0, "out.dtype", none);

  const DecodeSpec plain = spec_of(DType::bf16, 16, 4, 1);
  {
    const KernelChoice choice("tensor_cores");
    expect_rejected(plain, 1, 0, "FLASHKIT_DECODE_KERNEL", none);
  }
  {
    // The 8-warp CTA's 192 KB of ring on a device of 163 KB per CTA (an A100's).
    const KernelChoice choice("mma8");
    const ScopedEnv a100("FLASHKIT_SMEM_LIMIT_KB", "163");
    expect_rejected(plain, 1, 0, "FLASHKIT_DECODE_KERNEL", none);
  }
  expect_rejected(plain, 4, 0, "workspace", none);
  const DecodeCase c = make_decode_case(plain);
  expect_rejected(plain, 4, decode_workspace_elems(c, 4) - 1, "workspace", none);

  expect_rejected(plain, 1, 0, "kv.k_pages.data", [](PagedAttentionArgs& a) {
    // One element in: 2 bytes off 16-byte alignment (nothing is read: the call must fail first).
    std::int64_t shape[4], strides[4];
    for (int i = 0; i < 4; ++i) {
      shape[i] = a.kv.k_pages.size(i);
      strides[i] = a.kv.k_pages.stride(i);
    }
    a.kv.k_pages =
        Tensor::from_arrays(a.kv.k_pages.data_as<std::uint16_t>() + 1, a.kv.k_pages.dtype(), 4,
                            shape, strides, a.kv.k_pages.device());
  });
}

}  // namespace
}  // namespace flashkit::testing
