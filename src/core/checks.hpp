// The argument checks every validation shares (attention, merge, paged), so every message has one
// shape: "<argument>: expected <what>, got <what>".
#pragma once

#include <cstdint>
#include <string>

#include "core/mask_rules.hpp"
#include "flashkit/attention.hpp"
#include "flashkit/error.hpp"

namespace flashkit::core {

std::string num(std::int64_t v);
std::string num_real(double v);  // %g
void expect_defined(const std::string& name, const Tensor& t);
void expect_rank(const std::string& name, const Tensor& t, int rank);
// `why` says where the wanted size comes from ("heads_q", "the tokens of k").
void expect_size(const std::string& name, const Tensor& t, int dim, std::int64_t want,
                 const std::string& why);
// `of` names the tensor whose device everything must share.
void expect_device(const std::string& name, const Tensor& t, const Device& want,
                   const std::string& of = "q");
// Non-negative strides and a contiguous last dim.
void expect_layout(const std::string& name, const Tensor& t);
void expect_data(const std::string& name, const Tensor& t);
// All of the above: defined, `rank`, on `device`, laid out, with data.
void expect_tensor(const std::string& name, const Tensor& t, int rank, const Device& device,
                   const std::string& of = "q");
// Element i of a host-resident 1-D i32 tensor (offsets, lengths, positions).
std::int64_t host_i32(const Tensor& t, std::int64_t i);
// `device` must be the CPU: calls whose GPU path is not written say so, naming `name`.device.
void expect_cpu_only(const std::string& name, const Device& device, const std::string& what);
// Throws `e` again about `argument` instead of e.argument(), keeping what it expected and got: a
// call built on another call (cascade's levels, MLA's paged view) names its own arguments.
[[noreturn]] void rethrow_as(const Error& e, const std::string& argument);
// Mask fields and ALiBi slopes (f32 [heads_q] or [batch, heads_q]) as a kernel-ready rule.
MaskRule check_mask(const Mask& mask, std::int64_t batch, std::int64_t heads_q,
                    const Device& device);

}  // namespace flashkit::core
