// mla_decode and mla_append over caller-allocated arrays (the pages are written in place by
// mla_append).
#include <cstdint>
#include <optional>
#include <string>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include "bindings.hpp"
#include "flashkit/error.hpp"
#include "flashkit/mla.hpp"
#include "tensor_convert.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace flashkit::python {

namespace {

using OptIn = std::optional<InArray>;

MlaCache make_cache(const Tensor& pages, const OptIn& scale, const InArray& block_table) {
  MlaCache c;
  c.pages = pages;
  c.scale = to_tensor(scale, "scale");
  c.block_table = to_tensor(block_table, "block_table");
  return c;
}

void decode(const InArray& q, const InArray& pages, const InArray& block_table,
            const InArray& seq_lens, const OutArray& out, const std::optional<OutArray>& lse,
            const OptIn& scale, const OptIn& cu_seqlens_q, std::int64_t max_seqlen_q,
            std::int64_t latent_dim, std::optional<float> softmax_scale, bool causal,
            int num_splits, const std::string& algo) {
  if (algo != "auto" && algo != "reference") {
    throw Error("algo", "auto or reference for MLA decode", "'" + algo + "'");
  }
  MlaDecodeArgs a;
  a.q = to_tensor(q, "q");
  a.cache = make_cache(to_tensor(pages, "pages"), scale, block_table);
  a.cache.seq_lens = to_tensor(seq_lens, "seq_lens");
  a.cu_seqlens_q = to_tensor(cu_seqlens_q, "cu_seqlens_q");
  a.max_seqlen_q = max_seqlen_q;
  a.latent_dim = latent_dim;
  a.out = to_tensor(out, "out");
  a.lse = to_tensor(lse, "lse");
  a.softmax_scale = softmax_scale;
  a.causal = causal;
  a.num_splits = num_splits;
  a.algo = algo == "auto" ? Algo::automatic : Algo::reference;
  nb::gil_scoped_release release;
  mla_decode(a);
}

void append(const InArray& rows, const InArray& start_pos, const OutArray& pages,
            const InArray& block_table, const OptIn& scale) {
  MlaAppendArgs a;
  a.rows = to_tensor(rows, "rows");
  a.start_pos = to_tensor(start_pos, "start_pos");
  a.cache = make_cache(to_tensor(pages, "pages"), scale, block_table);
  nb::gil_scoped_release release;
  mla_append(a);
}

}  // namespace

void bind_mla(nb::module_& m) {
  m.def("mla_decode", &decode, "q"_a, "pages"_a, "block_table"_a, "seq_lens"_a, "out"_a,
        "lse"_a.none(), "scale"_a.none(), "cu_seqlens_q"_a.none(), "max_seqlen_q"_a, "latent_dim"_a,
        "softmax_scale"_a.none(), "causal"_a, "num_splits"_a, "algo"_a,
        "Writes out (and lse): absorbed MLA queries against the paged latent cache.");
  m.def("mla_append", &append, "rows"_a, "start_pos"_a, "pages"_a, "block_table"_a,
        "scale"_a.none(), "Writes new tokens' latent rows into their pages at start_pos.");
}

}  // namespace flashkit::python
