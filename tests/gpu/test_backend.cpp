// The CUDA backend's own checks and small entry points: errors raised before any launch (the
// poisoned output stays untouched), merge_states against the formula, the device list.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attention_case.hpp"
#include "device_tensor.hpp"
#include "flashkit/flashkit.hpp"

namespace flashkit::testing {
namespace {

CaseSpec small_spec(std::int64_t head_dim) {
  CaseSpec s;
  s.dtype = DType::bf16;
  s.seqlens_q = {40};
  s.seqlens_k = {40};
  s.head_dim = head_dim;
  return s;
}

// Runs `mutate` on the device arguments of a small case, expects flashkit::Error about
// `argument`, and checks the poisoned output was never written.
template <typename Mutate>
void expect_rejected(const CaseSpec& spec, Algo algo, const std::string& argument, Mutate mutate) {
  SCOPED_TRACE("expecting an error about " + argument);
  const CaseData c = make_case(spec);
  HostTensor out(spec.dtype, c.out_shape());
  const DeviceCase dev(c);
  DeviceTensor d_out(out);
  d_out.poison();
  AttentionArgs a = dev.forward_args(c, d_out.view(), Tensor(), algo);
  mutate(a);
  try {
    attention_forward(a);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), argument) << e.what();
  }
  expect_device_ok();
  d_out.copy_to(out);
  for (double x : out.values()) ASSERT_TRUE(std::isnan(x)) << "the output was written";
}

TEST(CudaBackend, HeadDimOutsideTheCompiledListIsRejected) {
  expect_rejected(small_spec(80), Algo::fa2, "q.shape[-1]", [](AttentionArgs&) {});
  expect_rejected(small_spec(80), Algo::automatic, "q.shape[-1]", [](AttentionArgs&) {});
}

TEST(CudaBackend, MisalignedPointerIsRejected) {
  expect_rejected(small_spec(64), Algo::fa2, "q.data", [](AttentionArgs& a) {
    // One element in: 2 bytes off 16-byte alignment (nothing is read: the call must fail first).
    std::int64_t shape[4], strides[4];
    for (int i = 0; i < 4; ++i) {
      shape[i] = a.q.size(i);
      strides[i] = a.q.stride(i);
    }
    a.q = Tensor::from_arrays(a.q.data_as<std::uint16_t>() + 1, a.q.dtype(), 4, shape, strides,
                              a.q.device());
  });
}

TEST(CudaBackend, RowStrideNotSixteenBytesIsRejected) {
  expect_rejected(small_spec(64), Algo::fa2, "k.stride[1]", [](AttentionArgs& a) {
    // 20 keys, one head, rows 65 elements (130 bytes) apart: not 16-byte aligned.
    std::int64_t shape[4] = {1, 20, 1, 64}, strides[4] = {1304, 65, 65, 1};
    a.k = Tensor::from_arrays(a.k.data(), a.k.dtype(), 4, shape, strides, a.k.device());
    a.v = Tensor::from_arrays(a.v.data(), a.v.dtype(), 4, shape, strides, a.v.device());
  });
}

TEST(CudaBackend, AlgoReferenceIsRejected) {
  expect_rejected(small_spec(64), Algo::reference, "algo", [](AttentionArgs&) {});
}

TEST(CudaBackend, DeviceThatIsNotCurrentIsRejected) {
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  expect_rejected(small_spec(64), Algo::fa2, "q.device", [count](AttentionArgs& a) {
    auto move = [count](Tensor& t) {
      std::int64_t shape[4], strides[4];
      for (int i = 0; i < t.rank(); ++i) {
        shape[i] = t.size(i);
        strides[i] = t.stride(i);
      }
      t = Tensor::from_arrays(t.data(), t.dtype(), t.rank(), shape, strides,
                              Device::cuda(count));  // one past the last device
    };
    move(a.q);
    move(a.k);
    move(a.v);
    move(a.out);
  });
}

TEST(CudaBackend, F16OutputForBf16InputsIsRejectedByFa2) {
  expect_rejected(small_spec(64), Algo::fa2, "out.dtype", [](AttentionArgs& a) {
    std::int64_t shape[4], strides[4];
    for (int i = 0; i < 4; ++i) {
      shape[i] = a.out.size(i);
      strides[i] = a.out.stride(i);
    }
    a.out = Tensor::from_arrays(a.out.data(), DType::f16, 4, shape, strides, a.out.device());
  });
}

// merge_states against the formula in double precision: states that saw no key (lse -inf, their
// o NaN) weigh nothing, tokens where no state saw a key give 0 and -inf.
// padded: each (state, token, head) row one element longer than dim, so no 4-element run of the
// states is aligned and the kernel takes its one-element-per-lane path.
void check_merge(std::int64_t states, std::int64_t dim, DType state_dtype, bool padded = false) {
  SCOPED_TRACE(std::to_string(states) + " states, dim " + std::to_string(dim) + ", " +
               dtype_name(state_dtype) + (padded ? ", padded" : ""));
  const std::int64_t tokens = 37, heads = 4;
  HostTensor o(state_dtype, {states, tokens, heads, dim},
               {states, tokens, heads, dim + (padded ? 1 : 0)});
  HostTensor lse(DType::f32, {states, tokens, heads});
  HostTensor out(DType::bf16, {tokens, heads, dim}), out_lse(DType::f32, {tokens, heads});
  std::mt19937 rng(9);
  o.fill_random(rng);
  lse.fill_random(rng, -3.0, 3.0);
  std::vector<double> l = lse.values(), ov = o.values();
  const double inf = std::numeric_limits<double>::infinity();
  auto at = [&](std::int64_t s, std::int64_t t, std::int64_t h) {
    return std::size_t((s * tokens + t) * heads + h);
  };
  for (std::int64_t i = 0; i < tokens * heads; i += 5) l[std::size_t(i)] = -inf;  // state 0 empty
  for (std::int64_t h = 0; h < heads; ++h) {  // token 0: every state empty
    for (std::int64_t s = 0; s < states; ++s) l[at(s, 0, h)] = -inf;
  }
  for (std::size_t i = 0; i < l.size(); ++i) {
    if (l[i] != -inf) continue;
    for (std::int64_t e = 0; e < dim; ++e) ov[i * std::size_t(dim) + std::size_t(e)] = NAN;
  }
  lse.set_values(l);
  o.set_values(ov);
  DeviceTensor d_o(o), d_lse(lse), d_out(out), d_out_lse(out_lse);
  d_out.poison();
  d_out_lse.poison();
  merge_states({d_o.view(), d_lse.view(), d_out.view(), d_out_lse.view(), nullptr});
  expect_device_ok();
  d_out.copy_to(out);
  d_out_lse.copy_to(out_lse);
  const std::vector<double> got = out.values(), got_lse = out_lse.values();
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (std::int64_t h = 0; h < heads; ++h) {
      double m = -inf;
      for (std::int64_t s = 0; s < states; ++s) m = std::max(m, l[at(s, t, h)]);
      double sum = 0;
      for (std::int64_t s = 0; s < states; ++s) {
        sum += l[at(s, t, h)] == -inf ? 0.0 : std::exp(l[at(s, t, h)] - m);
      }
      const double want_lse = m == -inf ? -inf : m + std::log(sum);
      const std::size_t ti = std::size_t(t * heads + h);
      if (want_lse == -inf) {
        EXPECT_EQ(got_lse[ti], -inf);
      } else {
        EXPECT_NEAR(got_lse[ti], want_lse, 1e-5);
      }
      for (std::int64_t e = 0; e < dim; ++e) {
        double want = 0;
        for (std::int64_t s = 0; s < states; ++s) {
          const double ls = l[at(s, t, h)];
          if (ls != -inf) want += std::exp(ls - want_lse) * ov[at(s, t, h) * std::size_t(dim) + e];
        }
        // bf16 output: half an ulp of values below 1, plus fp32 weights.
        ASSERT_NEAR(got[std::size_t(ti * dim + e)], want, 4e-3) << t << "," << h << "," << e;
      }
    }
  }
}

// Rounds of 4, 8 and 16 states with 4 elements per lane (16-byte f32 and 8-byte 16-bit loads;
// head dims 64 and 72 leave lanes of the 128-element chunk idle, 256 is two chunks); more than
// 16 states, one element per lane, with more than a warp's 32 (the weights in two rounds); a head
// dim that is not a multiple of 4 (33) or 32 (40); one state; unaligned rows.
TEST(CudaBackend, MergeStatesMatchesTheFormula) {
  check_merge(3, 72, DType::f32);
  check_merge(4, 64, DType::f32);
  check_merge(5, 128, DType::bf16);
  check_merge(9, 128, DType::f32);
  check_merge(16, 256, DType::f16);
  check_merge(40, 128, DType::f32);
  check_merge(17, 40, DType::f16);
  check_merge(1, 33, DType::bf16);
  check_merge(9, 128, DType::f32, true);
  check_merge(6, 64, DType::bf16, true);
}

TEST(CudaBackend, DevicesListsTheGpu) {
  const auto list = devices();
  bool found = false;
  for (const auto& d : list)
    found = found || (d.backend == "cuda" && d.name.find("sm_") != std::string::npos);
  EXPECT_TRUE(found);
  EXPECT_TRUE(build_info().cuda);
}

}  // namespace
}  // namespace flashkit::testing
