// Ring attention over caller-allocated arrays, and the communicators it runs on: the in-process
// ring (ranks as Python threads; the calls release the GIL) and the NCCL ring.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "flashkit/error.hpp"
#include "flashkit/ring.hpp"
#include "tensor_convert.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace flashkit::python {

namespace {

// One rank's communicator, shared with the Python object that holds it.
struct RingComm {
  std::shared_ptr<RingCommunicator> comm;
};

// The scalar settings of a ring call.
struct RingOptions {
  std::optional<float> softmax_scale;
  bool causal = false;
  std::int64_t window_left = -1;
  std::int64_t window_right = -1;
  std::int64_t prefix_len = 0;
  float softcap = 0.0f;
  std::string layout = "zigzag";
  bool deterministic = false;
  std::uintptr_t stream = 0;       // cudaStream_t as an integer
  std::uintptr_t comm_stream = 0;  // optional second stream for the shards (0: none)
};

RingLayout parse_layout(const std::string& name) {
  if (name == "zigzag") return RingLayout::zigzag;
  if (name == "contiguous") return RingLayout::contiguous;
  throw Error("layout", "'zigzag' or 'contiguous'", "'" + name + "'");
}

void fill_problem(RingProblem& p, const InArray& q, const InArray& k, const InArray& v,
                  const std::optional<InArray>& alibi_slopes, const RingComm& comm,
                  const RingOptions& o) {
  p.q = to_tensor(q, "q");
  p.k = to_tensor(k, "k");
  p.v = to_tensor(v, "v");
  p.softmax_scale = o.softmax_scale;
  p.mask.causal = o.causal;
  p.mask.window_left = o.window_left;
  p.mask.window_right = o.window_right;
  p.mask.prefix_len = o.prefix_len;
  p.mask.softcap = o.softcap;
  p.mask.alibi_slopes = to_tensor(alibi_slopes, "alibi_slopes");
  p.layout = parse_layout(o.layout);
  p.deterministic = o.deterministic;
  p.comm = comm.comm.get();
  p.stream = reinterpret_cast<void*>(o.stream);
  p.comm_stream = reinterpret_cast<void*>(o.comm_stream);
}

void ring_forward(const InArray& q, const InArray& k, const InArray& v, const OutArray& out,
                  const OutArray& lse, const std::optional<InArray>& alibi_slopes,
                  const RingComm& comm, const RingOptions& o) {
  RingAttentionArgs a;
  fill_problem(a, q, k, v, alibi_slopes, comm, o);
  a.out = to_tensor(out, "out");
  a.lse = to_tensor(lse, "lse");
  nb::gil_scoped_release release;  // the other ranks' threads must run while this one waits
  ring_attention_forward(a);
}

void ring_backward(const InArray& q, const InArray& k, const InArray& v, const InArray& out,
                   const InArray& lse, const InArray& dout, const OutArray& dq, const OutArray& dk,
                   const OutArray& dv, const std::optional<InArray>& alibi_slopes,
                   const RingComm& comm, const RingOptions& o) {
  RingBackwardArgs a;
  fill_problem(a, q, k, v, alibi_slopes, comm, o);
  a.out = to_tensor(out, "out");
  a.lse = to_tensor(lse, "lse");
  a.dout = to_tensor(dout, "dout");
  a.dq = to_tensor(dq, "dq");
  a.dk = to_tensor(dk, "dk");
  a.dv = to_tensor(dv, "dv");
  nb::gil_scoped_release release;
  ring_attention_backward(a);
}

std::vector<RingComm> in_process_ring(int ranks) {
  std::vector<RingComm> out;
  for (auto& c : make_in_process_ring(ranks)) out.push_back({std::move(c)});
  return out;
}

nb::bytes new_nccl_id() {
  const NcclRingId id = nccl_ring_id();
  return nb::bytes(id.bytes.data(), id.bytes.size());
}

RingComm nccl_ring(const nb::bytes& id, int ranks, int rank) {
  NcclRingId parsed;
  if (id.size() != parsed.bytes.size()) {
    throw Error("id", std::to_string(parsed.bytes.size()) + " bytes (nccl_ring_id())",
                std::to_string(id.size()) + " bytes");
  }
  std::copy_n(static_cast<const char*>(id.data()), parsed.bytes.size(), parsed.bytes.begin());
  nb::gil_scoped_release release;  // NCCL's set-up waits for every rank
  return {make_nccl_ring(parsed, ranks, rank)};
}

std::vector<std::int64_t> ring_positions(const std::string& layout, int ranks, int rank,
                                         std::int64_t local_seqlen) {
  const RingLayout l = parse_layout(layout);
  std::vector<std::int64_t> out;
  for (std::int64_t t = 0; t < local_seqlen; ++t) {
    out.push_back(ring_global_position(l, ranks, rank, local_seqlen, t));
  }
  return out;
}

}  // namespace

void bind_ring(nb::module_& m) {
  nb::class_<RingComm>(m, "RingComm",
                       "One rank's end of a ring (flashkit.in_process_ring, "
                       "flashkit.nccl_ring).",
                       nb::is_weak_referenceable())  // flashkit/ring.py's registry
      .def_prop_ro("rank", [](const RingComm& c) { return c.comm->rank(); })
      .def_prop_ro("size", [](const RingComm& c) { return c.comm->size(); })
      .def("__repr__", [](const RingComm& c) {
        return "RingComm(rank=" + std::to_string(c.comm->rank()) +
               ", size=" + std::to_string(c.comm->size()) + ")";
      });
  nb::class_<RingOptions>(m, "RingOptions", "The scalar settings of one ring attention call.")
      .def(nb::init<>())
      .def_rw("softmax_scale", &RingOptions::softmax_scale)
      .def_rw("causal", &RingOptions::causal)
      .def_rw("window_left", &RingOptions::window_left)
      .def_rw("window_right", &RingOptions::window_right)
      .def_rw("prefix_len", &RingOptions::prefix_len)
      .def_rw("softcap", &RingOptions::softcap)
      .def_rw("layout", &RingOptions::layout)
      .def_rw("deterministic", &RingOptions::deterministic)
      .def_rw("stream", &RingOptions::stream)
      .def_rw("comm_stream", &RingOptions::comm_stream);

  m.def("in_process_ring", &in_process_ring, "ranks"_a,
        "Communicators of one ring whose ranks are threads of this process.");
  m.def("nccl_ring_id", &new_nccl_id, "A new NCCL ring id (128 bytes), made by rank 0.");
  m.def("nccl_ring", &nccl_ring, "id"_a, "ranks"_a, "rank"_a,
        "This rank's NCCL ring communicator on the current CUDA device.");
  m.def("ring_positions", &ring_positions, "layout"_a, "ranks"_a, "rank"_a, "local_seqlen"_a,
        "The global token of each of a shard's rows.");
  m.def("ring_forward", &ring_forward, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a,
        "alibi_slopes"_a.none(), "comm"_a, "options"_a,
        "Writes this rank's out and lse of ring attention.");
  m.def("ring_backward", &ring_backward, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a, "dout"_a, "dq"_a,
        "dk"_a, "dv"_a, "alibi_slopes"_a.none(), "comm"_a, "options"_a,
        "Writes this rank's dq, dk, dv of ring attention.");
}

}  // namespace flashkit::python
