// cascade_attention and its workspace size over caller-allocated arrays.
#include <cstdint>
#include <optional>
#include <string>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include "bindings.hpp"
#include "flashkit/cascade.hpp"
#include "flashkit/error.hpp"
#include "tensor_convert.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace flashkit::python {

namespace {

// The scalar settings of a cascade call.
struct CascadeOptions {
  std::optional<float> softmax_scale;
  bool causal = true;
  float softcap = 0.0f;
  std::string algo = "auto";       // or "reference" (the fp64 oracle levels, CPU only)
  std::uintptr_t stream = 0;       // cudaStream_t as an integer
  std::uintptr_t side_stream = 0;  // optional second stream for the suffix level (0: none)
};

void cascade(const InArray& q, const InArray& shared_k_pages, const InArray& shared_v_pages,
             const InArray& shared_block_table, const InArray& shared_seq_len,
             const InArray& suffix_k_pages, const InArray& suffix_v_pages,
             const InArray& suffix_block_table, const InArray& suffix_seq_lens, const OutArray& out,
             const std::optional<OutArray>& lse, const OutArray& workspace,
             const CascadeOptions& o) {
  CascadeAttentionArgs a;
  a.q = to_tensor(q, "q");
  a.shared.k_pages = to_tensor(shared_k_pages, "shared_k_pages");
  a.shared.v_pages = to_tensor(shared_v_pages, "shared_v_pages");
  a.shared.block_table = to_tensor(shared_block_table, "shared_block_table");
  a.shared.seq_lens = to_tensor(shared_seq_len, "shared_seq_len");
  a.suffix.k_pages = to_tensor(suffix_k_pages, "suffix_k_pages");
  a.suffix.v_pages = to_tensor(suffix_v_pages, "suffix_v_pages");
  a.suffix.block_table = to_tensor(suffix_block_table, "suffix_block_table");
  a.suffix.seq_lens = to_tensor(suffix_seq_lens, "suffix_seq_lens");
  a.out = to_tensor(out, "out");
  a.lse = to_tensor(lse, "lse");
  a.workspace = to_tensor(workspace, "workspace");
  a.softmax_scale = o.softmax_scale;
  a.mask.causal = o.causal;
  a.mask.softcap = o.softcap;
  if (o.algo != "auto" && o.algo != "reference") {
    throw Error("algo", "auto or reference for cascade attention", "'" + o.algo + "'");
  }
  a.algo = o.algo == "auto" ? Algo::automatic : Algo::reference;
  a.stream = reinterpret_cast<void*>(o.stream);
  a.side_stream = reinterpret_cast<void*>(o.side_stream);
  nb::gil_scoped_release release;
  cascade_attention(a);
}

}  // namespace

void bind_cascade(nb::module_& m) {
  nb::class_<CascadeOptions>(m, "CascadeOptions", "The scalar settings of one cascade call.")
      .def(nb::init<>())
      .def_rw("softmax_scale", &CascadeOptions::softmax_scale)
      .def_rw("causal", &CascadeOptions::causal)
      .def_rw("softcap", &CascadeOptions::softcap)
      .def_rw("algo", &CascadeOptions::algo)
      .def_rw("stream", &CascadeOptions::stream)
      .def_rw("side_stream", &CascadeOptions::side_stream);
  m.def("cascade_attention", &cascade, "q"_a, "shared_k_pages"_a, "shared_v_pages"_a,
        "shared_block_table"_a, "shared_seq_len"_a, "suffix_k_pages"_a, "suffix_v_pages"_a,
        "suffix_block_table"_a, "suffix_seq_lens"_a, "out"_a, "lse"_a.none(), "workspace"_a,
        "options"_a,
        "Writes out (and lse): the queries against a shared prefix and their suffixes.");
  m.def("cascade_workspace_elems", &cascade_workspace_elems, "batch"_a, "q_len"_a, "heads_q"_a,
        "head_dim_v"_a, "f32 workspace elements a cascade call needs.");
}

}  // namespace flashkit::python
