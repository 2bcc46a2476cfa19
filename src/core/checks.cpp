#include "core/checks.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/validate.hpp"

namespace flashkit::core {

std::string num(std::int64_t v) {
  return std::to_string(v);
}

// snprintf rather than an ostringstream: formatting a float through iostreams crashed inside
// the Python module on the GPU machine (torch loaded in the same process), and error paths must
// not crash.
std::int64_t host_i32(const Tensor& t, std::int64_t i) {
  return t.data_as<const std::int32_t>()[i * t.stride(0)];
}

void expect_cpu_only(const std::string& name, const Device& device, const std::string& what) {
  if (!device.is_cpu()) {
    fail(name + ".device",
         "cpu (" + what + " runs on the CPU backend; its GPU path is not written yet)",
         device.str());
  }
}

void rethrow_as(const Error& e, const std::string& argument) {
  const std::string& arg = e.argument();
  const std::string what = e.what();  // "<arg>: expected <expected>, got <got>"
  const std::size_t expected = arg.size() + std::strlen(": expected ");
  const std::size_t got = what.rfind(", got ");
  if (arg.empty() || got == std::string::npos || got < expected) throw e;
  throw Error(argument, what.substr(expected, got - expected), what.substr(got + 6));
}

std::string num_real(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}

void expect_defined(const std::string& name, const Tensor& t) {
  if (!t.defined()) fail(name, "a tensor", "none");
}

void expect_rank(const std::string& name, const Tensor& t, int rank) {
  if (t.rank() != rank) {
    fail(name, "rank " + num(rank) + " tensor", "rank " + num(t.rank()) + " " + t.shape_str());
  }
}

void expect_size(const std::string& name, const Tensor& t, int dim, std::int64_t want,
                 const std::string& why) {
  if (t.size(dim) != want) {
    fail(name + ".shape[" + num(dim) + "]", num(want) + " (" + why + ")",
         num(t.size(dim)) + " in " + t.shape_str());
  }
}

void expect_device(const std::string& name, const Tensor& t, const Device& want,
                   const std::string& of) {
  if (t.device() != want)
    fail(name + ".device", want.str() + " (the device of " + of + ")", t.device().str());
}

void expect_layout(const std::string& name, const Tensor& t) {
  for (int i = 0; i < t.rank(); ++i) {
    if (t.stride(i) < 0) {
      fail(name + ".stride[" + num(i) + "]", "a non-negative stride", num(t.stride(i)));
    }
  }
  if (t.rank() > 0 && t.size(t.rank() - 1) > 1 && t.stride(t.rank() - 1) != 1) {
    fail(name + ".stride[" + num(t.rank() - 1) + "]", "1 (the last dim must be contiguous)",
         num(t.stride(t.rank() - 1)));
  }
}

void expect_data(const std::string& name, const Tensor& t) {
  if (t.data() == nullptr && t.numel() > 0) fail(name + ".data", "a non-null pointer", "null");
}

void expect_tensor(const std::string& name, const Tensor& t, int rank, const Device& device,
                   const std::string& of) {
  expect_defined(name, t);
  expect_rank(name, t, rank);
  expect_device(name, t, device, of);
  expect_layout(name, t);
  expect_data(name, t);
}

MaskRule check_mask(const Mask& mask, std::int64_t batch, std::int64_t heads_q,
                    const Device& device) {
  if (mask.window_left < -1) {
    fail("mask.window_left", ">= 0, or -1 for unbounded", num(mask.window_left));
  }
  if (mask.window_right < -1) {
    fail("mask.window_right", ">= 0, or -1 for unbounded", num(mask.window_right));
  }
  if (mask.prefix_len < 0) fail("mask.prefix_len", ">= 0", num(mask.prefix_len));
  // The CUDA kernels hold token indices below 2^31 (forward.cpp's limit) and add the offset to
  // them in 64 bits; a bound of the same size keeps every sum far from overflow.
  constexpr std::int64_t kCudaOffsetBound = std::int64_t(1) << 31;
  if (!device.is_cpu() &&
      (mask.diagonal_offset > kCudaOffsetBound || mask.diagonal_offset < -kCudaOffsetBound)) {
    fail("mask.diagonal_offset", "within +-2^31 on " + device.str(), num(mask.diagonal_offset));
  }
  if (!(mask.softcap >= 0.0f) || !std::isfinite(mask.softcap)) {
    fail("mask.softcap", "a finite value >= 0 (0 turns it off)", num_real(mask.softcap));
  }
  const Tensor& slopes = mask.alibi_slopes;
  if (slopes.defined()) {
    expect_dtype_in("mask.alibi_slopes", slopes, {DType::f32});
    expect_device("mask.alibi_slopes", slopes, device);
    expect_data("mask.alibi_slopes", slopes);
    if (slopes.rank() == 1) {
      expect_size("mask.alibi_slopes", slopes, 0, heads_q, "heads_q");
    } else if (slopes.rank() == 2) {
      expect_size("mask.alibi_slopes", slopes, 0, batch, "batch");
      expect_size("mask.alibi_slopes", slopes, 1, heads_q, "heads_q");
    } else {
      fail("mask.alibi_slopes", "shape [heads_q] or [batch, heads_q]", slopes.shape_str());
    }
    if (slopes.size(slopes.rank() - 1) > 1 && slopes.stride(slopes.rank() - 1) != 1) {
      fail("mask.alibi_slopes.stride", "a contiguous last dim", slopes.shape_str());
    }
  }
  MaskRule rule;
  rule.causal = mask.causal;
  rule.bottom_right = mask.align == CausalAlign::bottom_right;
  rule.window_left = mask.window_left;
  rule.window_right = mask.window_right;
  rule.prefix_len = mask.prefix_len;
  rule.softcap = mask.softcap;
  rule.diagonal_offset = mask.diagonal_offset;
  return rule;
}

}  // namespace flashkit::core
