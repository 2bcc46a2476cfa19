// apply_rotary on the CPU (a validated call, core/rotary.cpp).
#pragma once

#include "core/rotary_rule.hpp"
#include "flashkit/rotary.hpp"

namespace flashkit::cpu {

void apply_rotary(const RotaryArgs& args, const core::RotaryDims& dims);

}  // namespace flashkit::cpu
