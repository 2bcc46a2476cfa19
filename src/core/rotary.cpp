// apply_rotary: checks, then the tensors' backend. Host-resident cu_seqlens and positions are
// read, so a position past cos / sin is an Error; the CUDA kernel guards device-resident ones.
#include <string>

#include "core/checks.hpp"
#include "core/rotary_rule.hpp"
#include "core/validate.hpp"
#include "cpu/rotary.hpp"
#include "flashkit/error.hpp"
#include "flashkit/rotary.hpp"

#if FLASHKIT_HAVE_CUDA
#include "cuda/rotary.hpp"
#endif

namespace flashkit {

namespace {

using core::expect_size;
using core::expect_tensor;
using core::fail;
using core::host_i32;
using core::num;

// cu_seqlens i32 [batch + 1]; on the CPU: starting at 0, non-decreasing, within x's tokens.
std::int64_t check_cu_seqlens(const RotaryArgs& a, const Device& device) {
  const Tensor& cu = a.cu_seqlens;
  expect_tensor("cu_seqlens", cu, 1, device, "x");
  core::expect_dtype_in("cu_seqlens", cu, {DType::i32});
  const std::int64_t batch = cu.size(0) - 1;
  if (batch < 0) fail("cu_seqlens", "batch + 1 >= 1 offsets", "0");
  if (!device.is_cpu()) return batch;
  if (host_i32(cu, 0) != 0) fail("cu_seqlens[0]", "0", num(host_i32(cu, 0)));
  for (std::int64_t b = 0; b < batch; ++b) {
    if (host_i32(cu, b + 1) < host_i32(cu, b)) {
      fail("cu_seqlens[" + num(b + 1) + "]", ">= " + num(host_i32(cu, b)) + " (non-decreasing)",
           num(host_i32(cu, b + 1)));
    }
  }
  if (host_i32(cu, batch) > a.x.size(0)) {
    fail("cu_seqlens[" + num(batch) + "]", "<= " + num(a.x.size(0)) + " (the packed tokens of x)",
         num(host_i32(cu, batch)));
  }
  return batch;
}

// Sequence b's tokens: [start, start + len) of the packed dim, or 0.. of its batch row.
void sequence_span(const RotaryArgs& a, const core::RotaryDims& d, std::int64_t b,
                   std::int64_t& start, std::int64_t& len) {
  start = d.packed ? host_i32(a.cu_seqlens, b) : 0;
  len = d.packed ? host_i32(a.cu_seqlens, b + 1) - start : d.seqlen;
}

void expect_position(const std::string& name, std::int64_t p, std::int64_t max_positions) {
  if (p < 0 || p >= max_positions) {
    fail(name, "a position in [0, " + num(max_positions) + ") (the rows of cos and sin)", num(p));
  }
}

// Every token's position within cos / sin (host positions only).
void check_positions(const RotaryArgs& a, const core::RotaryDims& d) {
  for (std::int64_t b = 0; b < d.batch; ++b) {
    std::int64_t start = 0, len = 0;
    sequence_span(a, d, b, start, len);
    if (len == 0) continue;
    if (d.positions == core::RotaryPositions::offsets) {
      const std::int64_t first = host_i32(a.seqlen_offsets, b);
      expect_position("seqlen_offsets[" + num(b) + "]", first, d.max_positions);
      expect_position("seqlen_offsets[" + num(b) + "] + " + num(len - 1), first + len - 1,
                      d.max_positions);
    } else if (d.positions == core::RotaryPositions::ids) {
      const Tensor& ids = a.position_ids;
      for (std::int64_t i = 0; i < len; ++i) {
        const std::int64_t at =
            d.packed ? (start + i) * ids.stride(0) : b * ids.stride(0) + i * ids.stride(1);
        const std::string name = d.packed ? "position_ids[" + num(start + i) + "]"
                                          : "position_ids[" + num(b) + ", " + num(i) + "]";
        expect_position(name, ids.data_as<const std::int32_t>()[at], d.max_positions);
      }
    } else if (len > d.max_positions) {
      fail("cos.shape[0]",
           ">= " + num(len) + " (a row per position of sequence " + num(b) + "'s tokens)",
           num(d.max_positions));
    }
  }
}

core::RotaryDims validate_rotary(const RotaryArgs& a) {
  core::RotaryDims d;
  d.packed = a.cu_seqlens.defined();
  const int rank = d.packed ? 3 : 4;
  const Device device = a.x.device();
  expect_tensor("x", a.x, rank, device, "x");
  core::expect_dtype_in("x", a.x, {DType::f32, DType::f16, DType::bf16});
  expect_tensor("out", a.out, rank, device, "x");
  core::expect_dtype_in("out", a.out, {DType::f32, DType::f16, DType::bf16});
  for (int i = 0; i < rank; ++i) expect_size("out", a.out, i, a.x.size(i), "as x");
  if (a.out.data() == a.x.data()) {  // in place: each row is read whole before it is written
    bool same = a.out.dtype() == a.x.dtype();
    for (int i = 0; i < rank; ++i) same = same && a.out.stride(i) == a.x.stride(i);
    if (!same) {
      fail("out", "x itself (same dtype and strides) when it starts at x's address",
           "another view of that memory");
    }
  }
  d.heads = a.x.size(rank - 2);
  d.head_dim = a.x.size(rank - 1);
  d.batch = d.packed ? check_cu_seqlens(a, device) : a.x.size(0);
  d.seqlen = a.x.size(d.packed ? 0 : 1);

  expect_tensor("cos", a.cos, 2, device, "x");
  expect_tensor("sin", a.sin, 2, device, "x");
  for (const auto* t : {&a.cos, &a.sin}) {
    const std::string name = t == &a.cos ? "cos" : "sin";
    if (t->dtype() != DType::f32 && t->dtype() != a.x.dtype()) {
      fail(name + ".dtype", std::string("f32 or ") + dtype_name(a.x.dtype()) + " (x's dtype)",
           dtype_name(t->dtype()));
    }
  }
  expect_size("sin", a.sin, 0, a.cos.size(0), "as cos");
  expect_size("sin", a.sin, 1, a.cos.size(1), "as cos");
  d.max_positions = a.cos.size(0);
  d.rotary_dim = 2 * a.cos.size(1);
  if (d.rotary_dim < 2 || d.rotary_dim > d.head_dim) {
    fail("cos.shape[1]",
         "rotary_dim / 2 in 1.." + num(d.head_dim / 2) + " (rotary_dim <= the head dim of x)",
         num(a.cos.size(1)));
  }

  if (a.seqlen_offsets.defined() && a.position_ids.defined()) {
    fail("position_ids", "none when seqlen_offsets is given (one of the two says where tokens are)",
         "a tensor " + a.position_ids.shape_str());
  }
  if (a.seqlen_offsets.defined()) {
    d.positions = core::RotaryPositions::offsets;
    expect_tensor("seqlen_offsets", a.seqlen_offsets, 1, device, "x");
    core::expect_dtype_in("seqlen_offsets", a.seqlen_offsets, {DType::i32});
    expect_size("seqlen_offsets", a.seqlen_offsets, 0, d.batch, "batch");
  } else if (a.position_ids.defined()) {
    d.positions = core::RotaryPositions::ids;
    // Any strides, 0 included: one position for all of a sequence's tokens is a stride-0 view.
    const Tensor& ids = a.position_ids;
    core::expect_rank("position_ids", ids, d.packed ? 1 : 2);
    core::expect_device("position_ids", ids, device, "x");
    for (int i = 0; i < ids.rank(); ++i) {
      if (ids.stride(i) < 0) {
        fail("position_ids.stride[" + num(i) + "]", "a non-negative stride", num(ids.stride(i)));
      }
    }
    core::expect_data("position_ids", ids);
    core::expect_dtype_in("position_ids", a.position_ids, {DType::i32});
    expect_size("position_ids", a.position_ids, 0, d.packed ? a.x.size(0) : d.batch,
                d.packed ? "the packed tokens of x" : "batch");
    if (!d.packed) expect_size("position_ids", a.position_ids, 1, d.seqlen, "seqlen of x");
  }
  if (device.is_cpu()) check_positions(a, d);
  return d;
}

}  // namespace

void apply_rotary(const RotaryArgs& args) {
  const core::RotaryDims dims = validate_rotary(args);
  if (args.x.device().is_cpu()) return cpu::apply_rotary(args, dims);
#if FLASHKIT_HAVE_CUDA
  return cuda::apply_rotary(args, dims);
#else
  fail("x.device", "cpu (this build has no CUDA backend)", args.x.device().str());
#endif
}

}  // namespace flashkit
