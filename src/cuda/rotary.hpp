// apply_rotary on CUDA (a validated call, core/rotary.cpp). Plain C++ (no CUDA headers), so core
// code can include it.
#pragma once

#include "core/rotary_rule.hpp"
#include "flashkit/rotary.hpp"

namespace flashkit::cuda {

void apply_rotary(const RotaryArgs& args, const core::RotaryDims& dims);

}  // namespace flashkit::cuda
