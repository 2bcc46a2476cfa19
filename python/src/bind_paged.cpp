// paged_attention, append_kv and the split plan over caller-allocated arrays (the pages are
// written in place by append_kv).
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>

#include "bindings.hpp"
#include "flashkit/error.hpp"
#include "flashkit/paged.hpp"
#include "tensor_convert.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace flashkit::python {

namespace {

// The scalar settings of a paged call.
struct PagedOptions {
  std::optional<float> softmax_scale;
  bool causal = false;
  std::int64_t window_left = -1;
  std::int64_t window_right = -1;
  float softcap = 0.0f;
  std::int64_t max_seqlen_q = 0;
  int num_splits = 0;
  std::string algo = "auto";
  std::uintptr_t stream = 0;  // cudaStream_t as an integer
};

Algo parse_paged_algo(const std::string& name) {
  if (name == "auto") return Algo::automatic;
  if (name == "reference") return Algo::reference;
  throw Error("algo", "auto or reference for paged attention", "'" + name + "'");
}

using OptIn = std::optional<InArray>;
using OptOut = std::optional<OutArray>;

PagedKV make_kv(const Tensor& k_pages, const Tensor& v_pages, const OptIn& k_scale,
                const OptIn& v_scale, const InArray& block_table) {
  PagedKV kv;
  kv.k_pages = k_pages;
  kv.v_pages = v_pages;
  kv.k_scale = to_tensor(k_scale, "k_scale");
  kv.v_scale = to_tensor(v_scale, "v_scale");
  kv.block_table = to_tensor(block_table, "block_table");
  return kv;
}

void paged(const InArray& q, const InArray& k_pages, const InArray& v_pages,
           const InArray& block_table, const InArray& seq_lens, const OutArray& out,
           const OptOut& lse, const OptIn& k_scale, const OptIn& v_scale, const OptIn& cu_seqlens_q,
           const OptIn& alibi_slopes, const OptOut& workspace, const PagedOptions& o) {
  PagedAttentionArgs a;
  a.q = to_tensor(q, "q");
  a.kv = make_kv(to_tensor(k_pages, "k_pages"), to_tensor(v_pages, "v_pages"), k_scale, v_scale,
                 block_table);
  a.kv.seq_lens = to_tensor(seq_lens, "seq_lens");
  a.cu_seqlens_q = to_tensor(cu_seqlens_q, "cu_seqlens_q");
  a.max_seqlen_q = o.max_seqlen_q;
  a.out = to_tensor(out, "out");
  a.lse = to_tensor(lse, "lse");
  a.softmax_scale = o.softmax_scale;
  a.mask.causal = o.causal;
  a.mask.window_left = o.window_left;
  a.mask.window_right = o.window_right;
  a.mask.softcap = o.softcap;
  a.mask.alibi_slopes = to_tensor(alibi_slopes, "alibi_slopes");
  a.num_splits = o.num_splits;
  a.workspace = to_tensor(workspace, "workspace");
  a.algo = parse_paged_algo(o.algo);
  a.stream = reinterpret_cast<void*>(o.stream);
  nb::gil_scoped_release release;
  paged_attention(a);
}

void append(const InArray& k_new, const InArray& v_new, const InArray& start_pos,
            const OutArray& k_pages, const OutArray& v_pages, const InArray& block_table,
            const OptIn& k_scale, const OptIn& v_scale, std::uintptr_t stream) {
  AppendKVArgs a;
  a.k_new = to_tensor(k_new, "k_new");
  a.v_new = to_tensor(v_new, "v_new");
  a.start_pos = to_tensor(start_pos, "start_pos");
  a.kv = make_kv(to_tensor(k_pages, "k_pages"), to_tensor(v_pages, "v_pages"), k_scale, v_scale,
                 block_table);
  a.stream = reinterpret_cast<void*>(stream);
  nb::gil_scoped_release release;
  append_kv(a);
}

}  // namespace

void bind_paged(nb::module_& m) {
  nb::class_<PagedOptions>(m, "PagedOptions", "The scalar settings of one paged-attention call.")
      .def(nb::init<>())
      .def_rw("softmax_scale", &PagedOptions::softmax_scale)
      .def_rw("causal", &PagedOptions::causal)
      .def_rw("window_left", &PagedOptions::window_left)
      .def_rw("window_right", &PagedOptions::window_right)
      .def_rw("softcap", &PagedOptions::softcap)
      .def_rw("max_seqlen_q", &PagedOptions::max_seqlen_q)
      .def_rw("num_splits", &PagedOptions::num_splits)
      .def_rw("algo", &PagedOptions::algo)
      .def_rw("stream", &PagedOptions::stream);

  m.def("paged_attention", &paged, "q"_a, "k_pages"_a, "v_pages"_a, "block_table"_a, "seq_lens"_a,
        "out"_a, "lse"_a.none(), "k_scale"_a.none(), "v_scale"_a.none(), "cu_seqlens_q"_a.none(),
        "alibi_slopes"_a.none(), "workspace"_a.none(), "options"_a,
        "Writes out (and lse) for the queries against the paged KV cache.");
  m.def("append_kv", &append, "k_new"_a, "v_new"_a, "start_pos"_a, "k_pages"_a, "v_pages"_a,
        "block_table"_a, "k_scale"_a.none(), "v_scale"_a.none(), "stream"_a = 0,
        "Writes new tokens' K and V into their pages at start_pos.");
  m.def(
      "plan_paged_split",
      [](std::int64_t batch, std::int64_t q_len, std::int64_t heads_q, std::int64_t heads_kv,
         std::int64_t head_dim_v, std::int64_t max_seq_len, int processors) {
        const PagedSplitPlan p =
            plan_paged_split(batch, q_len, heads_q, heads_kv, head_dim_v, max_seq_len, processors);
        return std::make_pair(p.num_splits, p.workspace_elems);
      },
      "batch"_a, "q_len"_a, "heads_q"_a, "heads_kv"_a, "head_dim_v"_a, "max_seq_len"_a,
      "processors"_a, "(num_splits, workspace_elems) for a decode batch shape.");
  m.def("paged_workspace_elems", &paged_workspace_elems, "splits"_a, "query_rows"_a, "heads_q"_a,
        "head_dim_v"_a, "f32 workspace elements a call with `splits` splits needs.");
}

}  // namespace flashkit::python
