// forward, backward and merge_states over caller-allocated arrays. The scalar settings travel in
// one Options object so that forward and backward cannot drift apart.
#include <cstdint>
#include <optional>
#include <string>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include "bindings.hpp"
#include "flashkit/attention.hpp"
#include "flashkit/error.hpp"
#include "tensor_convert.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace flashkit::python {

namespace {

// Everything of an AttentionProblem that is not an array.
struct Options {
  std::optional<float> softmax_scale;
  bool causal = false;
  bool bottom_right = true;
  std::int64_t window_left = -1;
  std::int64_t window_right = -1;
  std::int64_t prefix_len = 0;
  float softcap = 0.0f;
  std::int64_t max_seqlen_q = 0;
  std::int64_t max_seqlen_k = 0;
  bool deterministic = false;
  std::string algo = "auto";
  std::uintptr_t stream = 0;  // cudaStream_t as an integer (torch's Stream.cuda_stream)
};

Algo parse_algo(const std::string& name) {
  if (name == "auto") return Algo::automatic;
  for (Algo a : {Algo::automatic, Algo::reference, Algo::naive, Algo::fa1, Algo::fa2, Algo::fa3}) {
    if (name == algo_name(a)) return a;
  }
  throw Error("algo", "one of auto, reference, naive, fa1, fa2, fa3", "'" + name + "'");
}

using OptIn = std::optional<InArray>;
using OptOut = std::optional<OutArray>;

void fill_problem(AttentionProblem& p, const InArray& q, const InArray& k, const InArray& v,
                  const OptIn& alibi_slopes, const OptIn& cu_seqlens_q, const OptIn& cu_seqlens_k,
                  const Options& o) {
  p.q = to_tensor(q, "q");
  p.k = to_tensor(k, "k");
  p.v = to_tensor(v, "v");
  p.softmax_scale = o.softmax_scale;
  p.mask.causal = o.causal;
  p.mask.align = o.bottom_right ? CausalAlign::bottom_right : CausalAlign::top_left;
  p.mask.window_left = o.window_left;
  p.mask.window_right = o.window_right;
  p.mask.prefix_len = o.prefix_len;
  p.mask.softcap = o.softcap;
  p.mask.alibi_slopes = to_tensor(alibi_slopes, "alibi_slopes");
  p.varlen.cu_seqlens_q = to_tensor(cu_seqlens_q, "cu_seqlens_q");
  p.varlen.cu_seqlens_k = to_tensor(cu_seqlens_k, "cu_seqlens_k");
  p.varlen.max_seqlen_q = o.max_seqlen_q;
  p.varlen.max_seqlen_k = o.max_seqlen_k;
  p.deterministic = o.deterministic;
  p.algo = parse_algo(o.algo);
  p.stream = reinterpret_cast<void*>(o.stream);
}

void forward(const InArray& q, const InArray& k, const InArray& v, const OutArray& out,
             const OptOut& lse, const OptIn& alibi_slopes, const OptIn& cu_seqlens_q,
             const OptIn& cu_seqlens_k, const Options& o) {
  AttentionArgs args;
  fill_problem(args, q, k, v, alibi_slopes, cu_seqlens_q, cu_seqlens_k, o);
  args.out = to_tensor(out, "out");
  args.lse = to_tensor(lse, "lse");
  nb::gil_scoped_release release;  // CPU work runs on flashkit's threads; let Python go on
  attention_forward(args);
}

void backward(const InArray& q, const InArray& k, const InArray& v, const InArray& out,
              const InArray& lse, const InArray& dout, const OutArray& dq, const OutArray& dk,
              const OutArray& dv, const OptIn& alibi_slopes, const OptIn& cu_seqlens_q,
              const OptIn& cu_seqlens_k, const Options& o) {
  BackwardArgs args;
  fill_problem(args, q, k, v, alibi_slopes, cu_seqlens_q, cu_seqlens_k, o);
  args.out = to_tensor(out, "out");
  args.lse = to_tensor(lse, "lse");
  args.dout = to_tensor(dout, "dout");
  args.dq = to_tensor(dq, "dq");
  args.dk = to_tensor(dk, "dk");
  args.dv = to_tensor(dv, "dv");
  nb::gil_scoped_release release;
  attention_backward(args);
}

void merge(const InArray& states_o, const InArray& states_lse, const OutArray& out,
           const OptOut& out_lse, std::uintptr_t stream) {
  MergeArgs args;
  args.states_o = to_tensor(states_o, "states_o");
  args.states_lse = to_tensor(states_lse, "states_lse");
  args.out = to_tensor(out, "out");
  args.out_lse = to_tensor(out_lse, "out_lse");
  args.stream = reinterpret_cast<void*>(stream);
  nb::gil_scoped_release release;
  merge_states(args);
}

}  // namespace

void bind_attention(nb::module_& m) {
  nb::class_<Options>(m, "Options", "The scalar settings of one attention call.")
      .def(nb::init<>())
      .def_rw("softmax_scale", &Options::softmax_scale)
      .def_rw("causal", &Options::causal)
      .def_rw("bottom_right", &Options::bottom_right)
      .def_rw("window_left", &Options::window_left)
      .def_rw("window_right", &Options::window_right)
      .def_rw("prefix_len", &Options::prefix_len)
      .def_rw("softcap", &Options::softcap)
      .def_rw("max_seqlen_q", &Options::max_seqlen_q)
      .def_rw("max_seqlen_k", &Options::max_seqlen_k)
      .def_rw("deterministic", &Options::deterministic)
      .def_rw("algo", &Options::algo)
      .def_rw("stream", &Options::stream);

  m.def("forward", &forward, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a.none(), "alibi_slopes"_a.none(),
        "cu_seqlens_q"_a.none(), "cu_seqlens_k"_a.none(), "options"_a,
        "Writes out (and lse when given) for attention(q, k, v).");
  m.def("backward", &backward, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a, "dout"_a, "dq"_a, "dk"_a,
        "dv"_a, "alibi_slopes"_a.none(), "cu_seqlens_q"_a.none(), "cu_seqlens_k"_a.none(),
        "options"_a, "Writes dq, dk, dv given the forward's out and lse and dout.");
  m.def("merge_states", &merge, "states_o"_a, "states_lse"_a, "out"_a, "out_lse"_a.none(),
        "stream"_a = 0, "Merges partial attention states over disjoint key sets.");
}

}  // namespace flashkit::python
