// Ring attention on CUDA over the in-process ring (a thread per rank, all on cuda:0 or spread
// over every device present) against the fp64 oracle on the whole sequence, under DESIGN.md's
// rule with the plain same-precision reference of the whole sequence: every rank's out, lse and
// gradients at their global positions, for both layouts, every mask, GQA, shifts on the main
// stream or on a second one beside the attention calls; outputs poisoned first. And the NCCL
// ring over every device present when there are at least two.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "attention_case.hpp"
#include "flashkit/error.hpp"
#include "flashkit/info.hpp"
#include "flashkit/ring.hpp"
#include "mask_kinds.hpp"

namespace flashkit::testing {
namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw Error(std::string(what) + ": " + cudaGetErrorString(status));
}

int device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

// A contiguous tensor on the current device holding a host tensor's elements (or 0xFF bytes:
// NaN in every float dtype), `offset` elements into its allocation, and the copy back.
class RankTensor {
 public:
  RankTensor(const HostTensor& host, bool poison, std::int64_t offset = 0)
      : bytes_(host.numel() * dtype_size(host.dtype())) {
    int device = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    check(cudaMalloc(&alloc_, bytes_ + (offset + 1) * dtype_size(host.dtype())), "cudaMalloc");
    data_ = static_cast<char*>(alloc_) + offset * std::int64_t(dtype_size(host.dtype()));
    if (poison) {
      check(cudaMemset(data_, 0xFF, bytes_), "cudaMemset");
    } else {
      check(cudaMemcpy(data_, host.view().data(), bytes_, cudaMemcpyHostToDevice), "cudaMemcpy");
    }
    const auto shape = host.shape();
    std::vector<std::int64_t> strides(shape.size(), 1);
    for (int i = int(shape.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * shape[i + 1];
    view_ = Tensor::from_arrays(data_, host.dtype(), int(shape.size()), shape.data(),
                                strides.data(), Device::cuda(device));
  }
  ~RankTensor() { cudaFree(alloc_); }
  RankTensor(const RankTensor&) = delete;
  RankTensor& operator=(const RankTensor&) = delete;
  const Tensor& view() const { return view_; }
  void copy_to(HostTensor& host) const {
    check(cudaMemcpy(host.view().data(), data_, bytes_, cudaMemcpyDeviceToHost), "cudaMemcpy");
  }

 private:
  std::size_t bytes_;
  void* alloc_ = nullptr;
  void* data_ = nullptr;
  Tensor view_;
};

struct Spec {
  int ranks = 2;
  RingLayout layout = RingLayout::zigzag;
  MaskKind mask = MaskKind::causal_br;
  DType dtype = DType::bf16;
  int head_dim = 64;
  std::int64_t local = 96;  // tokens per rank: 48-row zigzag chunks, off every tile size
  bool two_streams = true;
  bool spread = false;  // ranks over every device present, not all on cuda:0
  bool nccl = false;
  bool deterministic = false;
  bool grads_off_16_bytes = false;  // dq / dk / dv one f32 into their allocations
  std::string name() const {
    return std::to_string(ranks) + " ranks " +
           (layout == RingLayout::zigzag ? "zigzag" : "contiguous") + " " + mask_name(mask) + " " +
           dtype_name(dtype) + " d" + std::to_string(head_dim) + " L" + std::to_string(local) +
           (two_streams ? " two streams" : " one stream") + (spread ? " spread" : "") +
           (nccl ? " nccl" : "") + (grads_off_16_bytes ? " gradients off 16 bytes" : "");
  }
};

// Rows of `global` ([batch, total, heads, dim] values) for `rank`, in its local order.
HostTensor shard(const std::vector<double>& global, const Spec& s, std::int64_t batch,
                 std::int64_t heads, std::int64_t dim, int rank, DType dtype) {
  const std::int64_t total = s.local * s.ranks;
  HostTensor t(dtype, {batch, s.local, heads, dim});
  std::vector<double> v;
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t i = 0; i < s.local; ++i) {
      const std::int64_t g = ring_global_position(s.layout, s.ranks, rank, s.local, i);
      for (std::int64_t e = 0; e < heads * dim; ++e)
        v.push_back(global[std::size_t((b * total + g) * heads * dim + e)]);
    }
  t.set_values(v);
  return t;
}

// Writes a rank's [batch, L, heads, dim] values (or [batch, heads, L] lse) at their global rows.
void place(std::vector<double>& global, const std::vector<double>& mine, const Spec& s,
           std::int64_t batch, std::int64_t heads, std::int64_t dim, int rank, bool lse) {
  const std::int64_t total = s.local * s.ranks;
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t i = 0; i < s.local; ++i) {
      const std::int64_t g = ring_global_position(s.layout, s.ranks, rank, s.local, i);
      for (std::int64_t h = 0; h < heads; ++h)
        for (std::int64_t e = 0; e < dim; ++e) {
          if (lse) {
            global[std::size_t((b * heads + h) * total + g)] =
                mine[std::size_t((b * heads + h) * s.local + i)];
          } else {
            global[std::size_t(((b * total + g) * heads + h) * dim + e)] =
                mine[std::size_t(((b * s.local + i) * heads + h) * dim + e)];
          }
        }
    }
}

struct RankOut {
  HostTensor out, lse, dq, dk, dv;
  std::string error;
};

// One rank's forward and backward on its device; results copied back into `r`.
void run_rank(const Spec& s, const CaseData& c, RingCommunicator& comm, int rank, RankOut& r) {
  const int devices = device_count();
  const int device = s.spread || s.nccl ? rank % devices : 0;
  check(cudaSetDevice(device), "cudaSetDevice");
  const std::int64_t batch = c.batch, hq = c.spec.heads_q, hkv = c.spec.heads_kv;
  const std::int64_t d = c.spec.head_dim;
  const HostTensor q = shard(c.q.values(), s, batch, hq, d, rank, s.dtype);
  const HostTensor k = shard(c.k.values(), s, batch, hkv, d, rank, s.dtype);
  const HostTensor v = shard(c.v.values(), s, batch, hkv, d, rank, s.dtype);
  const HostTensor dout = shard(c.dout.values(), s, batch, hq, d, rank, s.dtype);
  r.out = HostTensor(s.dtype, {batch, s.local, hq, d});
  r.lse = HostTensor(DType::f32, {batch, hq, s.local});
  r.dq = HostTensor(DType::f32, {batch, s.local, hq, d});
  r.dk = HostTensor(DType::f32, {batch, s.local, hkv, d});
  r.dv = HostTensor(DType::f32, {batch, s.local, hkv, d});
  const RankTensor d_q(q, false), d_k(k, false), d_v(v, false), d_dout(dout, false);
  const std::int64_t grad_offset = s.grads_off_16_bytes ? 1 : 0;
  const RankTensor d_out(r.out, true), d_lse(r.lse, true), d_dq(r.dq, true, grad_offset),
      d_dk(r.dk, true, grad_offset), d_dv(r.dv, true, grad_offset);
  std::unique_ptr<RankTensor> slopes;
  if (c.spec.alibi) slopes = std::make_unique<RankTensor>(c.alibi_slopes, false);
  cudaStream_t main = nullptr, side = nullptr;
  check(cudaStreamCreateWithFlags(&main, cudaStreamNonBlocking), "cudaStreamCreate");
  check(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), "cudaStreamCreate");

  RingAttentionArgs a;
  a.q = d_q.view();
  a.k = d_k.view();
  a.v = d_v.view();
  a.softmax_scale = c.spec.softmax_scale;
  a.mask = c.forward_args(Tensor(), Tensor(), Algo::automatic).mask;  // the whole sequence's
  a.mask.alibi_slopes = slopes ? slopes->view() : Tensor();
  a.layout = s.layout;
  a.comm = &comm;
  a.stream = main;
  a.comm_stream = s.two_streams ? side : nullptr;
  a.deterministic = s.deterministic;
  a.out = d_out.view();
  a.lse = d_lse.view();
  ring_attention_forward(a);
  RingBackwardArgs g;
  static_cast<RingProblem&>(g) = a;
  g.out = d_out.view();
  g.lse = d_lse.view();
  g.dout = d_dout.view();
  g.dq = d_dq.view();
  g.dk = d_dk.view();
  g.dv = d_dv.view();
  ring_attention_backward(g);
  check(cudaStreamSynchronize(main), "the ring's stream");
  check(cudaStreamSynchronize(side), "the ring's side stream");
  cudaStreamDestroy(main);
  cudaStreamDestroy(side);
  d_out.copy_to(r.out);
  d_lse.copy_to(r.lse);
  d_dq.copy_to(r.dq);
  d_dk.copy_to(r.dk);
  d_dv.copy_to(r.dv);
}

// The whole sequence of `s`: batch 2, 4 query / 2 KV heads.
CaseData whole_case(const Spec& s) {
  CaseSpec whole;
  whole.dtype = s.dtype;
  whole.seqlens_q = whole.seqlens_k = {s.local * s.ranks, s.local * s.ranks};
  whole.heads_q = 4;
  whole.heads_kv = 2;
  whole.head_dim = s.head_dim;
  whole.seed = unsigned(s.ranks * 7 + int(s.mask));
  apply_mask(whole, s.mask);
  whole.align = CausalAlign::bottom_right;  // equal lengths: the two alignments agree
  return make_case(whole);
}

// Every rank's forward and backward, a thread each, on a new ring.
std::vector<RankOut> run_every_rank(const Spec& s, const CaseData& c) {
  std::vector<std::unique_ptr<RingCommunicator>> ring;
  NcclRingId id;
  if (s.nccl) {
    id = nccl_ring_id();
  } else {
    ring = make_in_process_ring(s.ranks);
  }
  std::vector<RankOut> got(std::size_t(s.ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < s.ranks; ++r) {
    threads.emplace_back([&, r] {
      RankOut& out = got[std::size_t(r)];
      try {
        std::unique_ptr<RingCommunicator> own;
        if (s.nccl) {
          check(cudaSetDevice(r % device_count()), "cudaSetDevice");
          own = make_nccl_ring(id, s.ranks, r);
        }
        run_rank(s, c, s.nccl ? *own : *ring[std::size_t(r)], r, out);
      } catch (const Error& e) {
        out.error = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return got;
}

void check_ring(const Spec& s) {
  SCOPED_TRACE(s.name());
  const CaseData c = whole_case(s);
  const CaseSpec& whole = c.spec;
  const ForwardResult oracle = oracle_forward(c), plain = plain_forward(c);
  const BackwardResult oracle_b = oracle_backward(c), plain_b = plain_backward(c);
  const std::vector<RankOut> got = run_every_rank(s, c);

  const std::int64_t b = c.batch, hq = whole.heads_q, hkv = whole.heads_kv, d = whole.head_dim;
  std::vector<double> out(oracle.out.size()), lse(oracle.lse.size()), dq(oracle_b.dq.size()),
      dk(oracle_b.dk.size()), dv(oracle_b.dv.size());
  for (int r = 0; r < s.ranks; ++r) {
    const RankOut& o = got[std::size_t(r)];
    ASSERT_EQ(o.error, "") << "rank " << r;
    place(out, o.out.values(), s, b, hq, d, r, false);
    place(lse, o.lse.values(), s, b, hq, 1, r, true);
    place(dq, o.dq.values(), s, b, hq, d, r, false);
    place(dk, o.dk.values(), s, b, hkv, d, r, false);
    place(dv, o.dv.values(), s, b, hkv, d, r, false);
  }
  // As tests/gpu/support/gpu_forward.cpp and test_backward.cpp: fp32 sums in another order than
  // the oracle's (here also across the ring's merges), lse in f32.
  EXPECT_EQ("", check_close("out", out, oracle.out, plain.out, 1e-5));
  EXPECT_EQ("", check_lse(lse, oracle.lse, 1e-4));
  EXPECT_EQ("", check_close("dq", dq, oracle_b.dq, plain_b.dq, 1e-5));
  EXPECT_EQ("", check_close("dk", dk, oracle_b.dk, plain_b.dk, 1e-5));
  EXPECT_EQ("", check_close("dv", dv, oracle_b.dv, plain_b.dv, 1e-5));
}

TEST(RingCuda, EveryMaskBothLayoutsOneDevice) {
  for (MaskKind mask : kAllMasks) {
    for (RingLayout layout : {RingLayout::zigzag, RingLayout::contiguous}) {
      Spec s;
      s.mask = mask;
      s.layout = layout;
      s.ranks = mask == MaskKind::window ? 4 : 3;  // a window narrower than a chunk pair
      check_ring(s);
    }
  }
}

TEST(RingCuda, ShiftsOnTheMainStreamHeadDimsAndDtypes) {
  for (int d : {64, 128, 256}) {
    Spec s;
    s.head_dim = d;
    s.dtype = d == 128 ? DType::f16 : DType::bf16;
    s.two_streams = d == 256;
    s.local = d == 256 ? 130 : 200;
    check_ring(s);
  }
  Spec f32;
  f32.dtype = DType::f32;
  f32.ranks = 2;
  check_ring(f32);
}

// Gradients that are not 16-byte aligned: the ring's adds into them take one element a lane (its
// own buffers take four), and calls writing them directly run the CUDA-core backward.
TEST(RingCuda, GradientsOffSixteenBytes) {
  for (int ranks : {1, 2}) {
    Spec s;
    s.ranks = ranks;
    s.grads_off_16_bytes = true;
    check_ring(s);
  }
}

TEST(RingCuda, DeterministicGradientsRepeatBitForBit) {
  Spec s;
  s.ranks = 3;
  s.deterministic = true;
  const CaseData c = whole_case(s);
  const std::vector<RankOut> first = run_every_rank(s, c), second = run_every_rank(s, c);
  for (int r = 0; r < s.ranks; ++r) {
    const RankOut &a = first[std::size_t(r)], &b = second[std::size_t(r)];
    ASSERT_EQ(a.error, "") << "rank " << r;
    ASSERT_EQ(b.error, "") << "rank " << r;
    EXPECT_EQ(a.dq.values(), b.dq.values()) << "rank " << r;
    EXPECT_EQ(a.dk.values(), b.dk.values()) << "rank " << r;
    EXPECT_EQ(a.dv.values(), b.dv.values()) << "rank " << r;
  }
}

TEST(RingCuda, OneRankIsPlainAttention) {
  Spec s;
  s.ranks = 1;
  check_ring(s);
}

TEST(RingCuda, RanksOnEveryDevice) {
  if (device_count() < 2) GTEST_SKIP() << "one CUDA device: the ranks share it in the tests above";
  Spec s;
  s.ranks = device_count() >= 4 ? 4 : 2;
  s.spread = true;
  check_ring(s);
}

TEST(RingCuda, NcclOverEveryDevice) {
  if (!build_info().nccl) GTEST_SKIP() << "built without NCCL";
  if (device_count() < 2) GTEST_SKIP() << "NCCL rings need a device per rank";
  for (RingLayout layout : {RingLayout::zigzag, RingLayout::contiguous}) {
    Spec s;
    s.ranks = device_count() >= 4 ? 4 : 2;
    s.nccl = true;
    s.layout = layout;
    check_ring(s);
  }
}

}  // namespace
}  // namespace flashkit::testing
