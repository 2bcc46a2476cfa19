// flashkit::BlockAllocator as flashkit._flashkit.BlockAllocator: the page bookkeeping of a paged
// KV cache (the Python KVCacheManager owns the page arrays and calls this for which pages).
#include <cstdint>
#include <utility>
#include <vector>

#include <nanobind/stl/pair.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "flashkit/kv_cache.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace flashkit::python {

void bind_cache(nb::module_& m) {
  nb::class_<BlockAllocator>(m, "BlockAllocator",
                             "Pages of a paged KV cache handed to sequences: refcounts, fork, "
                             "copy-on-write. Thread-safe.")
      .def(nb::init<std::int64_t, std::int64_t>(), "num_pages"_a, "page_size"_a)
      .def_prop_ro("num_pages", &BlockAllocator::num_pages)
      .def_prop_ro("page_size", &BlockAllocator::page_size)
      .def("free_pages", &BlockAllocator::free_pages)
      .def("create", &BlockAllocator::create, "A new empty sequence's id.")
      .def("create_with_prefix", &BlockAllocator::create_with_prefix, "pages"_a, "tokens"_a,
           "A new sequence sharing the cached prefix held in `pages`.")
      .def("fork", &BlockAllocator::fork, "parent"_a, "A child sharing every page of parent.")
      .def(
          "append",
          [](BlockAllocator& a, SeqId seq, std::int64_t tokens) {
            const AppendResult r = a.append(seq, tokens);
            std::vector<std::pair<PageId, PageId>> copies;
            for (const PageCopy& c : r.copies) copies.emplace_back(c.from, c.to);
            return std::make_pair(r.new_pages, copies);
          },
          "seq"_a, "tokens"_a,
          "Room for `tokens` more tokens: (new pages, [(from, to) page copies to make first]).")
      .def("free", &BlockAllocator::free, "seq"_a)
      .def("retain", &BlockAllocator::retain, "page"_a)
      .def("release", &BlockAllocator::release, "page"_a)
      .def("length", &BlockAllocator::length, "seq"_a)
      .def("pages", &BlockAllocator::pages, "seq"_a)
      .def("refcount", &BlockAllocator::refcount, "page"_a)
      .def("contains", &BlockAllocator::contains, "seq"_a)
      .def(
          "tables",
          [](const BlockAllocator& a, const std::vector<SeqId>& seqs) {
            const BlockTables t = a.tables(seqs);
            nb::dict d;
            d["indptr"] = t.indptr;
            d["indices"] = t.indices;
            d["last_page_len"] = t.last_page_len;
            d["padded"] = t.padded;
            d["max_pages"] = t.max_pages;
            d["seq_lens"] = t.seq_lens;
            return d;
          },
          "seqs"_a,
          "Block tables of seqs as lists: CSR (indptr, indices, last_page_len), padded "
          "[len(seqs) * max_pages] with -1 in unused slots, and seq_lens.");
}

}  // namespace flashkit::python
