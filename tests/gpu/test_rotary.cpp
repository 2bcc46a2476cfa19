// apply_rotary on CUDA against the definition computed in double (tests/cpu/rotary_case.hpp), on
// device copies of the CPU tests' cases with outputs poisoned: both pair layouts, the three ways
// of giving positions, packed sequences (rows past the last one stay unwritten), partial rotary
// dims, half precision, in place; a device position past the tables makes its pair NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "device_tensor.hpp"
#include "flashkit/rotary.hpp"
#include "rotary_case.hpp"

namespace flashkit::testing {
namespace {

// The case's tensors on the device, and its arguments over them.
struct DeviceRotary {
  explicit DeviceRotary(const RotaryCase& c)
      : x(c.x),
        cos(c.cos),
        sin(c.sin),
        offsets(c.seqlen_offsets),
        ids(c.position_ids),
        cu(c.cu_seqlens) {}
  RotaryArgs args(const RotaryCase& c, const Tensor& out) const {
    RotaryArgs a = c.args(out);
    a.x = x.view();
    a.cos = cos.view();
    a.sin = sin.view();
    if (a.cu_seqlens.defined()) a.cu_seqlens = cu.view();
    if (a.seqlen_offsets.defined()) a.seqlen_offsets = offsets.view();
    if (a.position_ids.defined()) {  // the host view's shape and strides (stride 0 included)
      const Tensor& h = a.position_ids;
      a.position_ids = h.rank() == 1 ? ids.view()
                                     : Tensor(ids.view().data(), DType::i32, {h.size(0), h.size(1)},
                                              {h.stride(0), h.stride(1)}, Device::cuda(0));
    }
    return a;
  }
  DeviceTensor x, cos, sin, offsets, ids, cu;
};

std::vector<double> run_on_device(const RotaryCase& c, std::vector<double>& poisoned) {
  HostTensor out(c.spec.dtype, c.shape());
  DeviceTensor d_out(out);
  d_out.poison();
  d_out.copy_to(out);
  poisoned = out.values();
  const DeviceRotary dev(c);
  apply_rotary(dev.args(c, d_out.view()));
  expect_device_ok();
  d_out.copy_to(out);
  return out.values();
}

void check_case(const RotarySpec& spec) {
  SCOPED_TRACE(spec.name());
  const RotaryCase c = make_rotary_case(spec);
  std::vector<double> poisoned;
  const std::vector<double> got = run_on_device(c, poisoned);
  EXPECT_LE(rounding_units(got, c.expected(poisoned), spec.dtype), 1.0);
}

TEST(CudaRotary, MatchesTheDefinition) {
  for (bool interleaved : {false, true}) {
    for (auto kind : {RotaryPositionKind::index, RotaryPositionKind::offsets,
                      RotaryPositionKind::ids, RotaryPositionKind::one_per_sequence}) {
      RotarySpec s;
      s.interleaved = interleaved;
      s.positions = kind;
      s.head_dim = 24;
      s.rotary_dim = 16;
      check_case(s);
    }
  }
}

TEST(CudaRotary, PackedSequences) {
  for (auto kind :
       {RotaryPositionKind::index, RotaryPositionKind::offsets, RotaryPositionKind::ids}) {
    RotarySpec s;
    s.packed = true;
    s.lens = {2, 0, 5, 1};
    s.batch = 4;
    s.positions = kind;
    check_case(s);
  }
}

TEST(CudaRotary, HalfPrecisionAtHeadDim128) {
  for (DType dtype : {DType::bf16, DType::f16}) {
    for (DType table : {DType::f32, dtype}) {
      RotarySpec s;
      s.dtype = dtype;
      s.table_dtype = table;
      s.head_dim = s.rotary_dim = 128;
      s.heads = 8;
      s.seqlen = 33;
      s.positions = RotaryPositionKind::offsets;
      check_case(s);
    }
  }
}

TEST(CudaRotary, InPlace) {
  RotarySpec s;
  s.positions = RotaryPositionKind::ids;
  s.interleaved = true;
  const RotaryCase c = make_rotary_case(s);
  const std::vector<double> want = c.expected(c.x.values());
  DeviceRotary dev(c);
  RotaryArgs a = dev.args(c, dev.x.view());
  apply_rotary(a);
  expect_device_ok();
  HostTensor got(s.dtype, c.shape());
  dev.x.copy_to(got);
  EXPECT_LE(rounding_units(got.values(), want, s.dtype), 1.0);
}

TEST(CudaRotary, DevicePositionPastTheTablesGivesNaN) {
  RotarySpec s;
  s.positions = RotaryPositionKind::offsets;
  s.head_dim = 20;
  s.rotary_dim = 16;
  RotaryCase c = make_rotary_case(s);
  c.seqlen_offsets.set_values({0.0, 38.0, 0.0});  // sequence 1's tokens 2.. are past row 39
  std::vector<double> poisoned;
  const std::vector<double> got = run_on_device(c, poisoned);
  const std::vector<double> x = c.x.values();
  for (std::int64_t i = 0; i < s.seqlen; ++i) {
    for (std::int64_t h = 0; h < s.heads; ++h) {
      const std::size_t base = std::size_t(((1 * s.seqlen + i) * s.heads + h) * s.head_dim);
      for (std::int64_t e = 0; e < s.head_dim; ++e) {
        const double y = got[base + std::size_t(e)];
        if (e >= s.rotary_dim) {
          EXPECT_EQ(y, x[base + std::size_t(e)]) << "copied column " << e;
        } else {
          EXPECT_EQ(std::isnan(y), 38 + i >= 40) << "token " << i << " element " << e;
        }
      }
    }
  }
}

}  // namespace
}  // namespace flashkit::testing
