#include "gpu_forward.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "device_tensor.hpp"

namespace flashkit::testing {

namespace {

// Slack on top of twice the plain reference's error: fp32 sums in another order than the
// oracle's, on outputs of size ~0.1..1, and half an ulp when the output is narrower than f32.
double atol_for(DType in, DType out) {
  const double sums = in == DType::f32 ? 2e-6 : 1e-5;
  return out == DType::bf16 && in != DType::bf16 ? sums + 4e-3 : sums;
}
// fp32 lse of |lse| < ~20; tensor-core fp32 sums of 16-bit products.
constexpr double kLseTol = 1e-4;

}  // namespace

HostTensor padded_copy(const HostTensor& t) {
  std::vector<std::int64_t> shape, alloc;
  for (int i = 0; i < t.view().rank(); ++i) shape.push_back(t.view().size(i));
  alloc = shape;
  alloc.back() += 8;
  HostTensor p(t.dtype(), shape, alloc);
  p.set_values(t.values());
  return p;
}

void expect_gpu_forward_matches(const CaseData& c, Algo algo, DType out_dtype) {
  const CaseSpec& spec = c.spec;
  SCOPED_TRACE(spec.name() + " algo " + algo_name(algo) + " out " + dtype_name(out_dtype));
  HostTensor out(out_dtype, c.out_shape()), lse(DType::f32, c.lse_shape());
  const DeviceCase dev(c);
  DeviceTensor d_out(out), d_lse(lse);
  d_out.poison();
  d_lse.poison();
  attention_forward(dev.forward_args(c, d_out.view(), d_lse.view(), algo));
  expect_device_ok();
  d_out.copy_to(out);
  d_lse.copy_to(lse);
  const ForwardResult oracle = oracle_forward(c), plain = plain_forward(c);
  EXPECT_EQ(
      "", check_close("out", out.values(), oracle.out, plain.out, atol_for(spec.dtype, out_dtype)));
  EXPECT_EQ("", check_lse(lse.values(), oracle.lse, kLseTol));
}

}  // namespace flashkit::testing
