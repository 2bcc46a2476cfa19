// quantize_fp8, hadamard_transform and attention_forward_fp8 over caller-allocated arrays.
#include <cstdint>
#include <optional>
#include <string>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include "bindings.hpp"
#include "flashkit/error.hpp"
#include "flashkit/fp8.hpp"
#include "tensor_convert.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace flashkit::python {

namespace {

void quantize(const InArray& x, const OutArray& out, const OutArray& scale, std::int64_t block_size,
              bool hadamard) {
  QuantizeFp8Args a;
  a.x = to_tensor(x, "x");
  a.out = to_tensor(out, "out");
  a.scale = to_tensor(scale, "scale");
  a.block_size = block_size;
  a.hadamard = hadamard;
  nb::gil_scoped_release release;
  quantize_fp8(a);
}

void hadamard(const InArray& x, const OutArray& out) {
  HadamardArgs a;
  a.x = to_tensor(x, "x");
  a.out = to_tensor(out, "out");
  nb::gil_scoped_release release;
  hadamard_transform(a);
}

struct Fp8Options {
  std::int64_t block_size = 128;
  bool rotated = false;
  std::optional<float> softmax_scale;
  bool causal = false;
  std::int64_t window_left = -1, window_right = -1;
  float softcap = 0.0f;
  std::string algo = "auto";
};

void attention(const InArray& q, const InArray& k, const InArray& v, const InArray& q_scale,
               const InArray& k_scale, const InArray& v_scale, const OutArray& out,
               const std::optional<OutArray>& lse, const Fp8Options& o) {
  if (o.algo != "auto" && o.algo != "reference") {
    throw Error("algo", "auto or reference for FP8 attention", "'" + o.algo + "'");
  }
  Fp8AttentionArgs a;
  a.q = to_tensor(q, "q");
  a.k = to_tensor(k, "k");
  a.v = to_tensor(v, "v");
  a.q_scale = to_tensor(q_scale, "q_scale");
  a.k_scale = to_tensor(k_scale, "k_scale");
  a.v_scale = to_tensor(v_scale, "v_scale");
  a.out = to_tensor(out, "out");
  a.lse = to_tensor(lse, "lse");
  a.block_size = o.block_size;
  a.rotated = o.rotated;
  a.softmax_scale = o.softmax_scale;
  a.mask.causal = o.causal;
  a.mask.window_left = o.window_left;
  a.mask.window_right = o.window_right;
  a.mask.softcap = o.softcap;
  a.algo = o.algo == "auto" ? Algo::automatic : Algo::reference;
  nb::gil_scoped_release release;
  attention_forward_fp8(a);
}

}  // namespace

void bind_fp8(nb::module_& m) {
  nb::class_<Fp8Options>(m, "Fp8Options", "The scalar settings of one FP8 attention call.")
      .def(nb::init<>())
      .def_rw("block_size", &Fp8Options::block_size)
      .def_rw("rotated", &Fp8Options::rotated)
      .def_rw("softmax_scale", &Fp8Options::softmax_scale)
      .def_rw("causal", &Fp8Options::causal)
      .def_rw("window_left", &Fp8Options::window_left)
      .def_rw("window_right", &Fp8Options::window_right)
      .def_rw("softcap", &Fp8Options::softcap)
      .def_rw("algo", &Fp8Options::algo);
  m.def("quantize_fp8", &quantize, "x"_a, "out"_a, "scale"_a, "block_size"_a, "hadamard"_a,
        "Writes x as e4m3 with one scale per block of tokens and head.");
  m.def("hadamard_transform", &hadamard, "x"_a, "out"_a,
        "Writes x times the orthonormal Hadamard matrix (along the head dim) to out.");
  m.def("attention_fp8", &attention, "q"_a, "k"_a, "v"_a, "q_scale"_a, "k_scale"_a, "v_scale"_a,
        "out"_a, "lse"_a.none(), "options"_a,
        "Writes out (and lse): attention over block-scaled e4m3 q, k and v.");
}

}  // namespace flashkit::python
