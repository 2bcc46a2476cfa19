// apply_rotary over caller-allocated arrays (out may be x itself).
#include <cstdint>
#include <optional>

#include <nanobind/stl/optional.h>

#include "bindings.hpp"
#include "flashkit/rotary.hpp"
#include "tensor_convert.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace flashkit::python {

namespace {

using OptIn = std::optional<InArray>;

void rotary(const InArray& x, const OutArray& out, const InArray& cos, const InArray& sin,
            const OptIn& cu_seqlens, const OptIn& seqlen_offsets, const OptIn& position_ids,
            bool interleaved, bool conjugate, std::uintptr_t stream) {
  RotaryArgs a;
  a.x = to_tensor(x, "x");
  a.out = to_tensor(out, "out");
  a.cos = to_tensor(cos, "cos");
  a.sin = to_tensor(sin, "sin");
  a.cu_seqlens = to_tensor(cu_seqlens, "cu_seqlens");
  a.seqlen_offsets = to_tensor(seqlen_offsets, "seqlen_offsets");
  a.position_ids = to_tensor(position_ids, "position_ids");
  a.interleaved = interleaved;
  a.conjugate = conjugate;
  a.stream = reinterpret_cast<void*>(stream);
  nb::gil_scoped_release release;
  apply_rotary(a);
}

}  // namespace

void bind_rotary(nb::module_& m) {
  m.def("apply_rotary", &rotary, "x"_a, "out"_a, "cos"_a, "sin"_a, "cu_seqlens"_a.none(),
        "seqlen_offsets"_a.none(), "position_ids"_a.none(), "interleaved"_a, "conjugate"_a,
        "stream"_a = 0, "Writes x with its rotary embedding applied to out (which may be x).");
}

}  // namespace flashkit::python
