// MLA decode and append as the paged calls they are (flashkit/mla.hpp): the latent cache viewed
// as pages of one KV head whose keys are the whole row and whose values are its first latent_dim
// columns, the same memory. MLA's own arguments are checked here under their own names; what the
// paged checks find in the views is reported under the MLA names too.
#include <string>

#include "core/checks.hpp"
#include "core/validate.hpp"
#include "flashkit/error.hpp"
#include "flashkit/mla.hpp"
#include "flashkit/paged.hpp"

namespace flashkit {

namespace {

using core::expect_size;
using core::expect_tensor;
using core::fail;
using core::num;

// [num_pages, page_size, width] as [num_pages, page_size, 1, columns]: one KV head.
Tensor one_head(const Tensor& pages, std::int64_t columns) {
  return Tensor(pages.data(), pages.dtype(), {pages.size(0), pages.size(1), 1, columns},
                {pages.stride(0), pages.stride(1), pages.size(2), 1}, pages.device());
}

// [batch, n, width] as [batch, n, 1, width].
Tensor one_head_rows(const Tensor& rows) {
  return Tensor(rows.data(), rows.dtype(), {rows.size(0), rows.size(1), 1, rows.size(2)},
                {rows.stride(0), rows.stride(1), rows.size(2), 1}, rows.device());
}

// The cache as paged_attention / append_kv take it; `value_columns` of each row are the values.
PagedKV paged_view(const MlaCache& cache, std::int64_t value_columns, const Device& device,
                   const std::string& of) {
  PagedKV kv;
  kv.k_pages = one_head(cache.pages, cache.pages.size(2));
  kv.v_pages = one_head(cache.pages, value_columns);
  if (cache.scale.defined()) {
    expect_tensor("cache.scale", cache.scale, 1, device, of);
    const Tensor per_head(cache.scale.data(), cache.scale.dtype(), {cache.scale.size(0), 1},
                          {cache.scale.stride(0), 1}, device);
    kv.k_scale = kv.v_scale = per_head;
  }
  kv.block_table = cache.block_table;
  kv.seq_lens = cache.seq_lens;
  return kv;
}

// A paged check's argument under its MLA name: kv.k_pages.shape[3] is cache.pages.shape[2],
// kv.k_scale[7, 0] is cache.scale[7], k_new.shape[3] is rows.shape[2].
std::string mla_name(const std::string& paged) {
  for (const char* pages : {"kv.k_pages", "kv.v_pages"}) {
    if (paged.rfind(pages, 0) != 0) continue;
    const std::string rest = paged.substr(std::string(pages).size());
    return "cache.pages" + (rest == ".shape[3]" ? std::string(".shape[2]") : rest);
  }
  for (const char* scale : {"kv.k_scale", "kv.v_scale"}) {
    if (paged.rfind(scale, 0) != 0) continue;
    std::string rest = paged.substr(std::string(scale).size());
    const std::size_t head = rest.rfind(", 0]");  // [page, 0] of the one-head view: [page]
    if (!rest.empty() && rest[0] == '[' && head != std::string::npos) rest.replace(head, 4, "]");
    return "cache.scale" + rest;
  }
  if (paged.rfind("kv.", 0) == 0) return "cache." + paged.substr(3);
  for (const char* rows : {"k_new", "v_new"}) {
    if (paged.rfind(rows, 0) != 0) continue;
    const std::string rest = paged.substr(std::string(rows).size());
    return "rows" + (rest == ".shape[3]" ? std::string(".shape[2]") : rest);
  }
  return paged;
}

template <typename Call>
void renaming_errors(Call&& call) {
  try {
    call();
  } catch (const Error& e) {
    const std::string name = mla_name(e.argument());
    if (name == e.argument()) throw;
    core::rethrow_as(e, name);
  }
}

}  // namespace

void mla_decode(const MlaDecodeArgs& a) {
  const bool packed = a.cu_seqlens_q.defined();
  const int rank = packed ? 3 : 4;
  const Device device = a.q.device();
  expect_tensor("q", a.q, rank, device);
  expect_tensor("cache.pages", a.cache.pages, 3, device);
  const std::int64_t width = a.cache.pages.size(2);
  expect_size("q", a.q, rank - 1, width, "the width of a cache row (latent_dim + rope_dim)");
  if (a.latent_dim < 1 || a.latent_dim > width) {
    fail("latent_dim", "1.." + num(width) + " (the value columns of a cache row)",
         num(a.latent_dim));
  }
  expect_tensor("out", a.out, rank, device);
  expect_size("out", a.out, rank - 1, a.latent_dim, "latent_dim");
  if (!a.softmax_scale) {
    fail("softmax_scale",
         "a value (the model's 1/sqrt(qk_nope_dim + rope_dim); the row width does not give it)",
         "none");
  }
  core::expect_cpu_only("q", device, "MLA");

  PagedAttentionArgs p;
  p.q = a.q;
  p.cu_seqlens_q = a.cu_seqlens_q;
  p.max_seqlen_q = a.max_seqlen_q;
  p.out = a.out;
  p.lse = a.lse;
  p.softmax_scale = a.softmax_scale;
  p.mask.causal = a.causal;
  p.num_splits = a.num_splits;
  p.workspace = a.workspace;
  p.algo = a.algo;
  p.stream = a.stream;
  renaming_errors([&] {
    p.kv = paged_view(a.cache, a.latent_dim, device, "q");
    paged_attention(p);
  });
}

void mla_append(const MlaAppendArgs& a) {
  const Device device = a.rows.device();
  expect_tensor("rows", a.rows, 3, device, "rows");
  expect_tensor("cache.pages", a.cache.pages, 3, device, "rows");
  expect_size("rows", a.rows, 2, a.cache.pages.size(2), "the width of a cache row");
  core::expect_cpu_only("rows", device, "MLA");

  AppendKVArgs p;
  p.k_new = one_head_rows(a.rows);
  // append_kv writes values too. Here they are the keys' own row, so the value side is its
  // first column alone: one element written twice per token, with the same bytes.
  p.v_new = Tensor(a.rows.data(), a.rows.dtype(), {a.rows.size(0), a.rows.size(1), 1, 1},
                   {a.rows.stride(0), a.rows.stride(1), 1, 1}, device);
  p.start_pos = a.start_pos;
  p.stream = a.stream;
  renaming_errors([&] {
    p.kv = paged_view(a.cache, 1, device, "rows");
    append_kv(p);
  });
}

}  // namespace flashkit
