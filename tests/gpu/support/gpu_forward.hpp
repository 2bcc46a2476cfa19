// One GPU forward case end to end: the case's inputs copied to the device, outputs poisoned,
// attention_forward on the device, results copied back and held to DESIGN.md's tolerance rule
// against the fp64 oracle (out) and to an absolute bound (lse).
#pragma once

#include <string>

#include "attention_case.hpp"
#include "flashkit/attention.hpp"
#include "mask_kinds.hpp"

namespace flashkit::testing {

// Runs the case on cuda:0 with `algo` and output dtype `out_dtype`, and EXPECTs out and lse to
// match the oracle.
void expect_gpu_forward_matches(const CaseData& c, Algo algo, DType out_dtype);
inline void expect_gpu_forward_matches(const CaseSpec& spec, Algo algo, DType out_dtype) {
  expect_gpu_forward_matches(make_case(spec), algo, out_dtype);
}
// A copy of `t` whose rows are padded (last dim allocated 8 elements wider): the same values
// at strides that are not the contiguous ones.
HostTensor padded_copy(const HostTensor& t);

inline void expect_gpu_forward_matches(const CaseSpec& spec, Algo algo) {
  expect_gpu_forward_matches(spec, algo, spec.dtype);
}

}  // namespace flashkit::testing
