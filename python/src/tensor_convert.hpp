// DLPack arrays (torch tensors, numpy arrays, anything with __dlpack__ or the buffer protocol) as
// flashkit::Tensor views: same memory, no copy. Inputs are taken read-only so that read-only numpy
// arrays are accepted; outputs must be writable.
#pragma once

#include <optional>
#include <string>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include "flashkit/tensor.hpp"

namespace flashkit::python {

using InArray = nanobind::ndarray<nanobind::ro>;
using OutArray = nanobind::ndarray<>;

// `name` is the argument's name, used in the flashkit::Error thrown for an array flashkit cannot
// view (unsupported dtype, device or rank).
Tensor to_tensor(const InArray& a, const std::string& name);
Tensor to_tensor(const OutArray& a, const std::string& name);

// Optional arguments: an undefined Tensor when left out.
template <typename Array>
Tensor to_tensor(const std::optional<Array>& a, const std::string& name) {
  return a ? to_tensor(*a, name) : Tensor();
}

}  // namespace flashkit::python
