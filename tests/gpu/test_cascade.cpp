// Cascade attention on CUDA and the tensor-core paged forward it runs (cuda/paged_fwd.hpp),
// against the fp64 paged oracle (paged_attention with Algo::reference on the same host tensors)
// under DESIGN.md's tolerance rule, with plain paged attention on the GPU held to the same rule on
// the same cache. Outputs, lse and the workspace are poisoned before every run; unused pages and
// slots hold NaN (cascade_case.hpp, paged_case.hpp).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "attention_case.hpp"
#include "cascade_case.hpp"
#include "core/validate.hpp"
#include "cuda/paged_fwd.hpp"
#include "device_tensor.hpp"
#include "expect_error.hpp"
#include "flashkit/flashkit.hpp"
#include "paged_case.hpp"
#include "smem_limit_env.hpp"

namespace flashkit::testing {
namespace {

// fp32 lse of |lse| < ~20 from tensor-core (or CUDA-core) fp32 sums of 16-bit products.
constexpr double kLseTol = 1e-4;
// Slack on top of twice the plain reference's error: fp32 sums in another order than the
// oracle's, and half a bf16 ulp of O(1) values when an f16 case writes bf16 (not used here).
constexpr double kAtol = 1e-5;

// A paged case's inputs on cuda:0.
struct DevicePaged {
  explicit DevicePaged(const PagedCase& c)
      : q(c.q), k(c.k_pages), v(c.v_pages), table(c.block_table), lens(c.seq_lens) {}
  PagedAttentionArgs args(const PagedCase& c, const Tensor& out, const Tensor& lse) const {
    PagedAttentionArgs a = c.args(out, lse, Algo::automatic, 1);
    a.q = q.view();
    a.kv.k_pages = k.view();
    a.kv.v_pages = v.view();
    a.kv.block_table = table.view();
    a.kv.seq_lens = lens.view();
    return a;
  }
  DeviceTensor q, k, v, table, lens;
};

std::vector<double> lse_packed(const HostTensor& lse, const PagedCase& c) {
  return packed_lse(lse.values(), c.spec.batch(), c.spec.heads_q, c.max_q);
}

// paged_attention on the GPU (the decode kernels, unsplit), or (tensor_cores) the paged forward
// called directly with `options`.
PagedResult run_paged_gpu(const PagedCase& c, DType out_dtype, bool tensor_cores,
                          const cuda::PagedFwdOptions& options = {}) {
  HostTensor out(out_dtype, c.out_shape()), lse(DType::f32, c.lse_shape());
  const DevicePaged dev(c);
  DeviceTensor d_out(out), d_lse(lse);
  d_out.poison();
  d_lse.poison();
  const PagedAttentionArgs a = dev.args(c, d_out.view(), d_lse.view());
  if (tensor_cores) {
    const core::PagedDims dims = core::validate_paged(a, 1);
    EXPECT_EQ("", cuda::paged_fwd_unsupported(a, dims, options));
    cuda::paged_fwd(a, dims, options);
  } else {
    paged_attention(a);
  }
  expect_device_ok();
  d_out.copy_to(out);
  d_lse.copy_to(lse);
  return {out.values(), lse_packed(lse, c)};
}

PagedResult run_cascade_gpu(const CascadeCase& c, DType out_dtype, Algo algo,
                            void* side_stream = nullptr) {
  const PagedCase& p = c.plain;
  HostTensor out(out_dtype, p.out_shape()), lse(DType::f32, p.lse_shape());
  HostTensor ws = make_workspace(c);
  const DevicePaged dev(p);
  DeviceTensor shared_table(c.shared_table), shared_len(c.shared_len);
  DeviceTensor suffix_k(c.suffix_k), suffix_v(c.suffix_v), suffix_table(c.suffix_table),
      suffix_lens(c.suffix_lens);
  DeviceTensor d_out(out), d_lse(lse), d_ws(ws);
  d_out.poison();
  d_lse.poison();
  d_ws.poison();
  CascadeAttentionArgs a = c.args(d_out.view(), d_lse.view(), d_ws.view());
  a.q = dev.q.view();
  a.shared.k_pages = dev.k.view();
  a.shared.v_pages = dev.v.view();
  a.shared.block_table = shared_table.view();
  a.shared.seq_lens = shared_len.view();
  a.suffix.k_pages = suffix_k.view();
  a.suffix.v_pages = suffix_v.view();
  a.suffix.block_table = suffix_table.view();
  a.suffix.seq_lens = suffix_lens.view();
  a.algo = algo;
  a.side_stream = side_stream;
  cascade_attention(a);
  expect_device_ok();
  d_out.copy_to(out);
  d_lse.copy_to(lse);
  return {out.values(), packed_lse(lse.values(), c.batch(), p.spec.heads_q, c.spec.q_len)};
}

// Cascade (tensor cores and, with fallback, decode kernels for the shared level) and plain paged
// attention on the GPU, each against the oracle.
void check_cascade_gpu(const CascadeSpec& spec, bool fallback = false) {
  SCOPED_TRACE(spec.name());
  const CascadeCase c = make_cascade_case(spec);
  const PagedResult oracle = run_paged(c.plain, Algo::reference, 1, DType::f64);
  const ForwardResult ref = plain_forward(contiguous_case(c.plain, spec.dtype));
  for (DType out : {spec.dtype, DType::f32}) {
    SCOPED_TRACE(std::string("out ") + dtype_name(out));
    const PagedResult plain = run_paged_gpu(c.plain, out, false);
    EXPECT_EQ("", check_close("plain paged out", plain.out, oracle.out, ref.out, kAtol));
    std::vector<Algo> algos{Algo::automatic};
    if (fallback) algos.push_back(Algo::fa1);  // the shared level on the decode kernels
    for (Algo algo : algos) {
      SCOPED_TRACE(std::string("algo ") + algo_name(algo));
      const PagedResult got = run_cascade_gpu(c, out, algo);
      EXPECT_EQ("", check_close("cascade out", got.out, oracle.out, ref.out, kAtol));
      EXPECT_EQ("", check_lse(got.lse, oracle.lse, kLseTol));
    }
  }
}

// --- cascade: dtype x page size x GQA x q_len; prefix, batch and causal vary with the case ---

using SweepParam = std::tuple<DType, std::int64_t, std::int64_t, std::int64_t>;
class CudaCascadeSweep : public ::testing::TestWithParam<SweepParam> {};

TEST_P(CudaCascadeSweep, MatchesOracleAndPlainPaged) {
  CascadeSpec s;
  std::tie(s.dtype, s.page_size, s.group, s.q_len) = GetParam();
  s.head_dim = 128;
  // Prefixes: empty, one token, page-unaligned (every page size but 1), a few splits long.
  const std::int64_t prefixes[] = {0, 1, 21, 300, 1100};
  const std::int64_t batches[] = {1, 3, 17};
  const std::int64_t k = s.page_size + s.group * 3 + s.q_len;
  s.prefix = prefixes[k % 5];
  s.batch = batches[k % 3];
  s.causal = k % 2 == 0;
  check_cascade_gpu(s);
}

std::string sweep_name(const ::testing::TestParamInfo<SweepParam>& info) {
  const auto [dtype, page_size, group, q_len] = info.param;
  return std::string(dtype_name(dtype)) + "_page" + std::to_string(page_size) + "_gqa" +
         std::to_string(group) + "_q" + std::to_string(q_len);
}

INSTANTIATE_TEST_SUITE_P(All, CudaCascadeSweep,
                         ::testing::Combine(::testing::Values(DType::bf16, DType::f16),
                                            ::testing::Values(1, 16, 64, 256),
                                            ::testing::Values(1, 4, 8), ::testing::Values(1, 3)),
                         sweep_name);

TEST(CudaCascade, EveryPrefixLengthKindAtEachBatch) {
  for (std::int64_t prefix : {0, 1, 15, 16, 17, 300, 2049}) {
    for (std::int64_t batch : {1, 5}) {
      CascadeSpec s;
      s.head_dim = 128;
      s.group = 4;
      s.prefix = prefix;
      s.batch = batch;
      check_cascade_gpu(s, /*fallback=*/prefix == 300);
    }
  }
}

TEST(CudaCascade, HeadDims64And256) {
  for (std::int64_t d : {64, 256}) {
    CascadeSpec s;
    s.head_dim = d;
    s.group = 4;
    s.q_len = 3;
    s.prefix = 700;
    s.batch = 4;
    check_cascade_gpu(s);
  }
}

TEST(CudaCascade, SoftcapScaleAndLongerQueries) {
  CascadeSpec s;
  s.head_dim = 128;
  s.group = 8;
  s.softcap = 2.0f;
  s.softmax_scale = 0.7f;
  s.q_len = 9;
  s.prefix = 900;
  s.batch = 7;
  check_cascade_gpu(s, /*fallback=*/true);
}

// Batch 64 over a 4k-token prefix (the benchmark's shape, smaller heads): many splits, many
// rows per CTA.
TEST(CudaCascade, ServingShape) {
  CascadeSpec s;
  s.head_dim = 128;
  s.group = 4;
  s.heads_kv = 1;
  s.prefix = 4096;
  s.batch = 64;
  check_cascade_gpu(s);
}

// A shared level that fills the GPU does not fork: on sm90 (132 SMs), d 64's 64-row tiles, 8 KV
// heads and batch 64 are 32 CTAs a split, and splits of more than 1024 keys (a 2304-token
// prefix over 2) would not leave half of the SMs idle, so 4 splits fill them and the suffix
// level folds their states into its epilogue (cuda::PriorStates).
TEST(CudaCascade, FoldsWhereTheSharedLevelFillsTheGpu) {
  CascadeSpec s;
  s.head_dim = 64;
  s.group = 4;
  s.heads_kv = 8;
  s.prefix = 2304;
  s.batch = 64;
  check_cascade_gpu(s);
}

// The suffix level on a second stream runs beside the shared level, and one merge follows both;
// on one stream the suffix level runs beside it on the library's own stream (sm90) or folds the
// shared level's states into its own epilogue (cuda::PriorStates), the same weights in another
// order: the two agree with the oracle under the tolerance rule. Where the shared level runs on
// the decode kernels nothing forks, and both calls give the same bits.
TEST(CudaCascade, SideStreamAgreesWithOneStream) {
  cudaStream_t side;
  ASSERT_EQ(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
  for (std::int64_t prefix : {0, 700}) {
    CascadeSpec s;
    s.head_dim = 128;
    s.group = 4;
    s.prefix = prefix;
    s.batch = 9;
    SCOPED_TRACE(s.name());
    const CascadeCase c = make_cascade_case(s);
    const PagedResult oracle = run_paged(c.plain, Algo::reference, 1, DType::f64);
    const ForwardResult ref = plain_forward(contiguous_case(c.plain, s.dtype));
    for (Algo algo : {Algo::automatic, Algo::fa1}) {
      SCOPED_TRACE(std::string("algo ") + algo_name(algo));
      const PagedResult one = run_cascade_gpu(c, DType::bf16, algo);
      const PagedResult two = run_cascade_gpu(c, DType::bf16, algo, side);
      for (const PagedResult* got : {&one, &two}) {
        EXPECT_EQ("", check_close("cascade out", got->out, oracle.out, ref.out, kAtol));
        EXPECT_EQ("", check_lse(got->lse, oracle.lse, kLseTol));
      }
      if (algo == Algo::fa1) {
        EXPECT_EQ(one.out, two.out);
        EXPECT_EQ(one.lse, two.lse);
      }
    }
  }
  cudaStreamDestroy(side);
}

// No allocation and no host synchronisation: the call records into a CUDA graph, and replaying
// it computes what the oracle does; with a side stream too, captured from a thread that never
// called cascade before (its fork/join event is made during the capture).
void check_captured(bool with_side_stream) {
  CascadeSpec s;
  s.head_dim = 128;
  s.group = 4;
  s.prefix = 1000;
  s.batch = 6;
  const CascadeCase c = make_cascade_case(s);
  const PagedCase& p = c.plain;
  HostTensor out(DType::bf16, p.out_shape()), lse(DType::f32, p.lse_shape());
  HostTensor ws = make_workspace(c);
  const DevicePaged dev(p);
  DeviceTensor shared_table(c.shared_table), shared_len(c.shared_len);
  DeviceTensor suffix_k(c.suffix_k), suffix_v(c.suffix_v), suffix_table(c.suffix_table),
      suffix_lens(c.suffix_lens);
  DeviceTensor d_out(out), d_lse(lse), d_ws(ws);
  d_out.poison();
  d_lse.poison();
  d_ws.poison();
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  CascadeAttentionArgs a = c.args(d_out.view(), d_lse.view(), d_ws.view());
  a.q = dev.q.view();
  a.shared.k_pages = dev.k.view();
  a.shared.v_pages = dev.v.view();
  a.shared.block_table = shared_table.view();
  a.shared.seq_lens = shared_len.view();
  a.suffix.k_pages = suffix_k.view();
  a.suffix.v_pages = suffix_v.view();
  a.suffix.block_table = suffix_table.view();
  a.suffix.seq_lens = suffix_lens.view();
  a.stream = stream;
  cudaStream_t side = nullptr;
  if (with_side_stream) {
    ASSERT_EQ(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
    a.side_stream = side;
  }
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  cascade_attention(a);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  expect_device_ok();
  d_out.copy_to(out);
  d_lse.copy_to(lse);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  if (side != nullptr) cudaStreamDestroy(side);
  const PagedResult oracle = run_paged(p, Algo::reference, 1, DType::f64);
  const ForwardResult ref = plain_forward(contiguous_case(p, s.dtype));
  EXPECT_EQ("", check_close("out", out.values(), oracle.out, ref.out, kAtol));
  EXPECT_EQ("",
            check_lse(packed_lse(lse.values(), c.batch(), p.spec.heads_q, 1), oracle.lse, kLseTol));
}

TEST(CudaCascade, IsCapturedInACudaGraph) {
  check_captured(false);
}

TEST(CudaCascade, IsCapturedWithASideStream) {
  std::thread fresh([] {
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    check_captured(true);
  });
  fresh.join();
}

// FLASHKIT_CASCADE_SPLITS caps the shared level's key splits (a benchmark knob): every cap gives
// the oracle's answer, and a value that is not a positive integer is refused by name.
TEST(CudaCascade, SplitCapKeepsTheAnswerAndRefusesBadValues) {
  struct Unset {  // the cap must not outlive this test, whatever fails in it
    ~Unset() { unsetenv("FLASHKIT_CASCADE_SPLITS"); }
  } unset;
  CascadeSpec s;
  s.head_dim = 128;
  s.group = 4;
  s.prefix = 2100;
  s.batch = 5;
  for (const char* cap : {"1", "3", "1000"}) {
    SCOPED_TRACE(std::string("FLASHKIT_CASCADE_SPLITS=") + cap);
    setenv("FLASHKIT_CASCADE_SPLITS", cap, 1);
    check_cascade_gpu(s);
  }
  const CascadeCase c = make_cascade_case(s);
  for (const char* bad : {"0", "-2", "four", "3x"}) {
    SCOPED_TRACE(bad);
    setenv("FLASHKIT_CASCADE_SPLITS", bad, 1);
    expect_error([&] { run_cascade_gpu(c, DType::bf16, Algo::automatic); },
                 "FLASHKIT_CASCADE_SPLITS", "a positive integer");
  }
}

TEST(CudaCascade, MisalignedWorkspaceIsRefused) {
  CascadeSpec s;
  s.head_dim = 128;
  const CascadeCase c = make_cascade_case(s);
  const PagedCase& p = c.plain;
  HostTensor out(DType::bf16, p.out_shape());
  HostTensor ws(DType::f32, {cascade_workspace_elems(c.batch(), 1, p.spec.heads_q, 128) + 1});
  const DevicePaged dev(p);
  DeviceTensor shared_table(c.shared_table), shared_len(c.shared_len);
  DeviceTensor suffix_k(c.suffix_k), suffix_v(c.suffix_v), suffix_table(c.suffix_table),
      suffix_lens(c.suffix_lens);
  DeviceTensor d_out(out), d_ws(ws);
  d_out.poison();
  const Tensor& w = d_ws.view();
  CascadeAttentionArgs a =
      c.args(d_out.view(), Tensor(),
             Tensor(static_cast<float*>(w.data()) + 1, DType::f32, {w.numel() - 1}, w.device()));
  a.q = dev.q.view();
  a.shared.k_pages = dev.k.view();
  a.shared.v_pages = dev.v.view();
  a.shared.block_table = shared_table.view();
  a.shared.seq_lens = shared_len.view();
  a.suffix.k_pages = suffix_k.view();
  a.suffix.v_pages = suffix_v.view();
  a.suffix.block_table = suffix_table.view();
  a.suffix.seq_lens = suffix_lens.view();
  expect_error([&] { cascade_attention(a); }, "workspace.data", "16-byte aligned");
  d_out.copy_to(out);
  for (double x : out.values()) ASSERT_TRUE(std::isnan(x)) << "out written by a failed call";
}

// --- the tensor-core paged forward on its own: decode and chunked prefill shapes ------------

PagedSpec forward_spec(DType dtype, std::int64_t page_size, std::int64_t group,
                       std::int64_t q_len) {
  PagedSpec s;
  s.kv_dtype = s.q_dtype = dtype;
  s.page_size = page_size;
  s.heads_kv = 2;
  s.heads_q = 2 * group;
  s.head_dim = 128;
  s.seq_lens = {q_len, q_len + 45, q_len + 300};
  s.q_lens.assign(3, q_len);
  s.seed = std::uint32_t(page_size * 7 + group * 3 + q_len);
  return s;
}

// Whether the "{64, 128, 256}" list in a refusal names head_dim.
bool compiled_head_dims_name(const std::string& why, std::int64_t head_dim) {
  const std::size_t open = why.find('{'), close = why.find('}');
  if (open == std::string::npos || close == std::string::npos || close < open) return false;
  std::string list = why.substr(open + 1, close - open - 1);
  std::replace(list.begin(), list.end(), ',', ' ');
  std::istringstream in(list);
  std::int64_t d = 0;
  while (in >> d) {
    if (d == head_dim) return true;
  }
  return false;
}

// The sm90 kernel runs on compute capability 9.0 only (in builds with sm_90a and the head dim),
// every page size included: where it cannot run a case, it must be another device.
bool sm90_runs(const PagedCase& c, const PagedSpec& spec) {
  HostTensor out(spec.q_dtype, c.out_shape());
  const DevicePaged dev(c);
  DeviceTensor d_out(out);
  const PagedAttentionArgs a = dev.args(c, d_out.view(), Tensor());
  cuda::PagedFwdOptions sm90;
  sm90.kernel = cuda::PagedFwdKernel::sm90;
  const std::string why = cuda::paged_fwd_unsupported(a, core::validate_paged(a, 1), sm90);
  if (why.empty()) return true;
  int device = 0, major = 0, minor = 0;
  EXPECT_EQ(cudaSuccess, cudaGetDevice(&device));
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (why == "the sm90 kernel in a build without sm_90a") return false;  // none to compare
  // A build may compile fewer sm90 head dims (FLASHKIT_SM90_FWD_HEAD_DIMS): none to compare when
  // the refusal's list of compiled head dims lacks this one (a refusal naming it still fails).
  if (why.rfind("head dim not in {", 0) == 0 && !compiled_head_dims_name(why, spec.head_dim)) {
    return false;
  }
  EXPECT_NE(10 * major + minor, 90) << "the sm90 kernel refused: " << why;
  return false;
}

// Both tensor-core kernels (where the device has them) against the oracle; pack_gqa: the query
// heads of a group as rows of one tile.
void check_paged_forward(const PagedSpec& spec, bool pack_gqa = false) {
  SCOPED_TRACE(spec.name());
  const PagedCase c = make_paged_case(spec);
  const PagedResult oracle = run_paged(c, Algo::reference, 1, DType::f64);
  const ForwardResult ref = plain_forward(contiguous_case(c, spec.q_dtype));
  std::vector<cuda::PagedFwdKernel> kernels{cuda::PagedFwdKernel::sm80};
  if (sm90_runs(c, spec)) kernels.push_back(cuda::PagedFwdKernel::sm90);
  for (cuda::PagedFwdKernel kernel : kernels) {
    SCOPED_TRACE(kernel == cuda::PagedFwdKernel::sm80 ? "sm80 kernel" : "sm90 kernel");
    for (DType out : {spec.q_dtype, DType::f32}) {
      SCOPED_TRACE(std::string("out ") + dtype_name(out));
      cuda::PagedFwdOptions options;
      options.kernel = kernel;
      options.pack_gqa = pack_gqa;
      const PagedResult got = run_paged_gpu(c, out, true, options);
      EXPECT_EQ("", check_close("out", got.out, oracle.out, ref.out, kAtol));
      EXPECT_EQ("", check_lse(got.lse, oracle.lse, kLseTol));
    }
  }
}

TEST(CudaPagedForward, MatchesOracleOverPageSizesGroupsAndQueryCounts) {
  for (DType dtype : {DType::bf16, DType::f16}) {
    for (std::int64_t page : {1, 16, 64, 256}) {
      for (std::int64_t group : {1, 4, 8}) {
        for (std::int64_t q_len : {1, 5, 130}) {
          check_paged_forward(forward_spec(dtype, page, group, q_len));
        }
      }
    }
  }
}

TEST(CudaPagedForward, MasksAndScoreModifiers) {
  for (int m = 0; m < 4; ++m) {
    PagedSpec s = forward_spec(DType::bf16, 16, 4, 70);
    if (m == 0) s.causal = false;
    if (m == 1) s.window_left = 33;
    if (m == 2) {
      s.window_left = 10;
      s.prefix_len = 29;
    }
    if (m == 3) {
      s.softcap = 2.5f;
      s.softmax_scale = 1.0f;
    }
    check_paged_forward(s);
  }
}

// Packed rows cross tile ends (5 or 130 tokens x the group) and sequences end inside a page.
TEST(CudaPagedForward, GqaPackedRowsWithoutPositionalMasks) {
  for (std::int64_t d : {64, 128, 256}) {
    for (std::int64_t page : {16, 256}) {
      for (std::int64_t q_len : {5, 130}) {
        PagedSpec s = forward_spec(d == 128 ? DType::bf16 : DType::f16, page, 4, q_len);
        s.head_dim = d;
        s.causal = false;
        check_paged_forward(s, /*pack_gqa=*/true);
      }
    }
  }
}

// The sm90 kernel packs a GQA group into its tiles' query rows: 64 at d = 64, 128 otherwise. A
// group of 128 divides the d = 128 tile but not the d = 64 one, where the sm90 kernel refuses it
// by name and the automatic choice runs the sm80 kernel, which matches the oracle.
TEST(CudaPagedForward, GqaPackThatDoesNotDivideTheTileRunsOnSm80) {
  int device = 0, major = 0, minor = 0;
  ASSERT_EQ(cudaSuccess, cudaGetDevice(&device));
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  for (std::int64_t d : {64, 128}) {
    PagedSpec s = forward_spec(DType::bf16, 16, 128, 3);
    s.head_dim = d;
    s.causal = false;
    SCOPED_TRACE(s.name());
    const PagedCase c = make_paged_case(s);
    HostTensor out(s.q_dtype, c.out_shape());
    const DevicePaged dev(c);
    DeviceTensor d_out(out);
    const PagedAttentionArgs a = dev.args(c, d_out.view(), Tensor());
    const core::PagedDims dims = core::validate_paged(a, 1);
    cuda::PagedFwdOptions sm90, packed;
    sm90.kernel = cuda::PagedFwdKernel::sm90;
    sm90.pack_gqa = packed.pack_gqa = true;
    const std::string why = cuda::paged_fwd_unsupported(a, dims, sm90);
    if (why != "the sm90 kernel in a build without sm_90a" && 10 * major + minor == 90) {
      EXPECT_EQ(d == 64 ? "a GQA group not dividing the sm90 kernel's 64-row tiles" : "", why);
      EXPECT_EQ(d == 64 ? cuda::PagedFwdKernel::sm80 : cuda::PagedFwdKernel::sm90,
                cuda::paged_fwd_kernel(a, dims, packed));
    }
    const PagedResult oracle = run_paged(c, Algo::reference, 1, DType::f64);
    const ForwardResult ref = plain_forward(contiguous_case(c, s.q_dtype));
    const PagedResult got = run_paged_gpu(c, s.q_dtype, true, packed);
    EXPECT_EQ("", check_close("out", got.out, oracle.out, ref.out, kAtol));
    EXPECT_EQ("", check_lse(got.lse, oracle.lse, kLseTol));
  }
}

TEST(CudaPagedForward, HeadDims64And256) {
  for (std::int64_t d : {64, 256}) {
    PagedSpec s = forward_spec(DType::f16, 16, 4, 37);
    s.head_dim = d;
    check_paged_forward(s);
  }
}

// d = 256 in the 128 x 64 tile shape of a 163 KB A100 (the H200's default is 64 x 64).
TEST(CudaPagedForward, HeadDim256InTheA100TileShape) {
  const ScopedSmemLimit limit("163");
  PagedSpec s = forward_spec(DType::bf16, 16, 4, 150);
  s.head_dim = 256;
  check_paged_forward(s);
}

// paged_attention runs calls of more than 128 query rows per KV head (q_len * group; 48 where
// the sm90 kernel runs them) on the paged forward, the rest on the decode kernels: both sides of
// both lines against the oracle (group 4: q_len 12 and 13, 32 and 33). (Rows padded by 3
// elements, as PagedSpec::strided makes them, are refused by both CUDA paths: not 16-byte
// aligned.)
TEST(CudaPagedForward, PagedAttentionRoutesLongQueryBlocksHere) {
  for (std::int64_t q_len : {12, 13, 32, 33, 200}) {
    const PagedSpec s = forward_spec(DType::bf16, 16, 4, q_len);
    SCOPED_TRACE(s.name());
    const PagedCase c = make_paged_case(s);
    const PagedResult oracle = run_paged(c, Algo::reference, 1, DType::f64);
    const ForwardResult ref = plain_forward(contiguous_case(c, s.q_dtype));
    const PagedResult got = run_paged_gpu(c, s.q_dtype, false);
    EXPECT_EQ("", check_close("out", got.out, oracle.out, ref.out, kAtol));
    EXPECT_EQ("", check_lse(got.lse, oracle.lse, kLseTol));
  }
}

TEST(CudaPagedForward, SaysWhatItCannotRun) {
  PagedSpec s = forward_spec(DType::bf16, 16, 4, 5);
  s.alibi = true;
  const PagedCase c = make_paged_case(s);
  HostTensor out(DType::bf16, c.out_shape());
  const DevicePaged dev(c);
  DeviceTensor d_out(out), slopes(c.alibi_slopes);
  PagedAttentionArgs a = dev.args(c, d_out.view(), Tensor());
  a.mask.alibi_slopes = slopes.view();
  const core::PagedDims dims = core::validate_paged(a, 1);
  EXPECT_EQ("ALiBi", cuda::paged_fwd_unsupported(a, dims));
  expect_error([&] { cuda::paged_fwd(a, dims); }, "q", "ALiBi");
  cuda::PagedFwdOptions split;
  split.key_splits = 2;
  split.split_keys = 64;
  PagedAttentionArgs b = a;
  b.mask.alibi_slopes = Tensor();
  const core::PagedDims dims_b = core::validate_paged(b, 1);
  EXPECT_EQ("key splits of more than one cache sequence",
            cuda::paged_fwd_unsupported(b, dims_b, split));
  s.strided = true;
  s.alibi = false;
  const PagedCase padded = make_paged_case(s);
  const DevicePaged dev_padded(padded);
  DeviceTensor padded_out(HostTensor(DType::bf16, padded.out_shape()));
  const PagedAttentionArgs p = dev_padded.args(padded, padded_out.view(), Tensor());
  EXPECT_EQ("rows not 16-byte aligned", cuda::paged_fwd_unsupported(p, core::validate_paged(p, 1)));
}

}  // namespace
}  // namespace flashkit::testing
