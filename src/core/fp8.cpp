// FP8 entry points: checks, then the CPU backend. attention_forward_fp8 dequantizes q, k and v
// into fp32 and runs attention_forward on them (so masks, GQA and the oracle are the usual
// ones), rotating the output back when the inputs were rotated.
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "core/checks.hpp"
#include "core/validate.hpp"
#include "cpu/fp8.hpp"
#include "flashkit/error.hpp"
#include "flashkit/fp8.hpp"

namespace flashkit {

namespace {

using core::expect_size;
using core::expect_tensor;
using core::fail;
using core::num;

void expect_block_size(std::int64_t block_size) {
  if (block_size < 1) fail("block_size", ">= 1 tokens per scale", num(block_size));
}

void expect_power_of_two_dim(const std::string& name, const Tensor& t, const std::string& why) {
  const std::int64_t d = t.size(3);
  if (d < 1 || (d & (d - 1)) != 0) fail(name + ".shape[3]", "a power of two " + why, num(d));
}

// scale f32 [batch, heads, ceil(seqlen / block_size)] of `x` [batch, seqlen, heads, d].
void expect_scale(const std::string& name, const Tensor& scale, const Tensor& x,
                  const std::string& of, std::int64_t block_size) {
  expect_tensor(name, scale, 3, x.device(), of);
  core::expect_dtype_in(name, scale, {DType::f32});
  expect_size(name, scale, 0, x.size(0), "batch of " + of);
  expect_size(name, scale, 1, x.size(2), "heads of " + of);
  expect_size(name, scale, 2, (x.size(1) + block_size - 1) / block_size,
              "ceil(seqlen / block_size) blocks of " + of);
}

// A [batch, seqlen, heads, d] row-major f32 buffer and its view.
struct Dense {
  explicit Dense(const Tensor& like, std::int64_t d)
      : values(std::size_t(like.size(0) * like.size(1) * like.size(2) * d)),
        view(values.data(), DType::f32, {like.size(0), like.size(1), like.size(2), d}) {}
  std::vector<float> values;
  Tensor view;
};

}  // namespace

void quantize_fp8(const QuantizeFp8Args& a) {
  const Device device = a.x.device();
  expect_tensor("x", a.x, 4, device, "x");
  core::expect_dtype_in("x", a.x, {DType::f32, DType::f16, DType::bf16});
  expect_tensor("out", a.out, 4, device, "x");
  core::expect_dtype_in("out", a.out, {DType::e4m3});
  for (int i = 0; i < 4; ++i) expect_size("out", a.out, i, a.x.size(i), "as x");
  expect_block_size(a.block_size);
  expect_scale("scale", a.scale, a.x, "x", a.block_size);
  if (a.hadamard) expect_power_of_two_dim("x", a.x, "for the Hadamard rotation");
  core::expect_cpu_only("x", device, "FP8 attention");
  cpu::quantize_fp8(a);
}

void hadamard_transform(const HadamardArgs& a) {
  const Device device = a.x.device();
  expect_tensor("x", a.x, 4, device, "x");
  core::expect_dtype_in("x", a.x, {DType::f32, DType::f16, DType::bf16});
  expect_tensor("out", a.out, 4, device, "x");
  core::expect_dtype_in("out", a.out, {DType::f64, DType::f32, DType::f16, DType::bf16});
  for (int i = 0; i < 4; ++i) expect_size("out", a.out, i, a.x.size(i), "as x");
  expect_power_of_two_dim("x", a.x, "(the order of the Hadamard matrix)");
  if (a.out.data() == a.x.data()) {
    bool same = a.out.dtype() == a.x.dtype();
    for (int i = 0; i < 4; ++i) same = same && a.out.stride(i) == a.x.stride(i);
    if (!same) fail("out", "x itself when it starts at x's address", "another view of it");
  }
  core::expect_cpu_only("x", device, "FP8 attention");
  cpu::hadamard_transform(a);
}

void attention_forward_fp8(const Fp8AttentionArgs& a) {
  const Device device = a.q.device();
  expect_block_size(a.block_size);
  for (const auto& [name, x, scale] :
       {std::tuple{"q", &a.q, &a.q_scale}, std::tuple{"k", &a.k, &a.k_scale},
        std::tuple{"v", &a.v, &a.v_scale}}) {
    expect_tensor(name, *x, 4, device);
    core::expect_dtype_in(name, *x, {DType::e4m3});
    expect_scale(std::string(name) + "_scale", *scale, *x, name, a.block_size);
  }
  if (a.rotated) expect_power_of_two_dim("v", a.v, "to rotate the output back");
  core::expect_cpu_only("q", device, "FP8 attention");

  const Dense q(a.q, a.q.size(3)), k(a.k, a.k.size(3)), v(a.v, a.v.size(3));
  cpu::dequantize_fp8(a.q, a.q_scale, a.block_size, q.view);
  cpu::dequantize_fp8(a.k, a.k_scale, a.block_size, k.view);
  cpu::dequantize_fp8(a.v, a.v_scale, a.block_size, v.view);
  AttentionArgs p;
  p.q = q.view;
  p.k = k.view;
  p.v = v.view;
  p.softmax_scale = a.softmax_scale;
  p.mask = a.mask;
  p.algo = a.algo;
  p.out = a.out;
  p.lse = a.lse;
  if (!a.rotated) return attention_forward(p);
  core::validate_forward(p);  // out's shape and dtype before the fp32 result is made
  const Dense rotated(a.q, a.v.size(3));
  p.out = rotated.view;
  attention_forward(p);
  hadamard_transform({rotated.view, a.out, nullptr});
}

}  // namespace flashkit
