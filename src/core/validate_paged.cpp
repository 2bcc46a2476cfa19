// Checks of paged_attention and append_kv. Shapes and dtypes are checked for every device; on
// the CPU the index arrays (seq_lens, block_table, cu_seqlens_q, start_pos) are read too, so a
// sequence longer than its pages or a page id past the pool is an Error, not a wild read. (A
// device-resident table cannot be read without a synchronisation; the CUDA kernels trust it.)
#include <algorithm>
#include <cmath>
#include <string>

#include "core/checks.hpp"
#include "core/validate.hpp"
#include "flashkit/paged.hpp"

namespace flashkit::core {

namespace {

// Element i (or [i, j]) of a host i32 array.
std::int64_t at(const Tensor& t, std::int64_t i) {
  return t.data_as<const std::int32_t>()[i * t.stride(0)];
}
std::int64_t at(const Tensor& t, std::int64_t i, std::int64_t j) {
  return t.data_as<const std::int32_t>()[i * t.stride(0) + j * t.stride(1)];
}

// What kernels need to know about the cache tensors.
struct CacheShape {
  std::int64_t batch, num_pages, page_size, heads_kv, head_dim, head_dim_v, max_pages;
  bool fp8;
};

void check_scale(const std::string& name, const Tensor& s, const CacheShape& c,
                 const Device& device) {
  expect_tensor(name, s, 2, device, "the pages");
  expect_dtype_in(name, s, {DType::f32});
  expect_size(name, s, 0, c.num_pages, "num_pages");
  expect_size(name, s, 1, c.heads_kv, "kv_heads");
}

// k_pages / v_pages [num_pages, page_size, kv_heads, d] of one dtype (`value_dtype` or e4m3
// with scales), and block_table i32 [batch, max_pages]. seq_lens is the caller's to check.
CacheShape check_cache(const PagedKV& kv, DType value_dtype, std::int64_t batch,
                       const Device& device, const std::string& of) {
  expect_tensor("kv.k_pages", kv.k_pages, 4, device, of);
  expect_tensor("kv.v_pages", kv.v_pages, 4, device, of);
  const DType dt = kv.k_pages.dtype();
  if (dt != value_dtype && dt != DType::e4m3) {
    fail("kv.k_pages.dtype",
         std::string(dtype_name(value_dtype)) + " (the dtype of " + of + ") or e4m3",
         dtype_name(dt));
  }
  if (kv.v_pages.dtype() != dt) {
    fail("kv.v_pages.dtype", std::string(dtype_name(dt)) + " (the dtype of kv.k_pages)",
         dtype_name(kv.v_pages.dtype()));
  }
  // Only the head dim may differ: d_v != d (MLA's latent values are a prefix of its keys).
  for (int i = 0; i < 3; ++i)
    expect_size("kv.v_pages", kv.v_pages, i, kv.k_pages.size(i), "as k_pages");
  CacheShape c{batch,
               kv.k_pages.size(0),
               kv.k_pages.size(1),
               kv.k_pages.size(2),
               kv.k_pages.size(3),
               kv.v_pages.size(3),
               0,
               dt == DType::e4m3};
  const std::int64_t ps = c.page_size;
  if (ps < 1 || ps > 256 || (ps & (ps - 1)) != 0) {
    fail("kv.k_pages.shape[1]", "a page size that is a power of two in 1..256", num(ps));
  }
  if (c.heads_kv < 1) fail("kv.k_pages.shape[2]", "at least 1 KV head", num(c.heads_kv));
  if (c.head_dim < 1) fail("kv.k_pages.shape[3]", "a head dim >= 1", num(c.head_dim));
  if (c.head_dim_v < 1) fail("kv.v_pages.shape[3]", "a head dim >= 1", num(c.head_dim_v));

  if (c.fp8) {
    check_scale("kv.k_scale", kv.k_scale, c, device);
    check_scale("kv.v_scale", kv.v_scale, c, device);
  } else {
    const std::string why =
        "none (scales belong to e4m3 pages; these are " + std::string(dtype_name(dt)) + ")";
    if (kv.k_scale.defined()) fail("kv.k_scale", why, "a tensor " + kv.k_scale.shape_str());
    if (kv.v_scale.defined()) fail("kv.v_scale", why, "a tensor " + kv.v_scale.shape_str());
  }

  expect_tensor("kv.block_table", kv.block_table, 2, device, of);
  expect_dtype_in("kv.block_table", kv.block_table, {DType::i32});
  expect_size("kv.block_table", kv.block_table, 0, batch, "batch");
  c.max_pages = kv.block_table.size(1);
  return c;
}

// Tokens [0, end) of sequence b: their pages must exist in the pool.
void check_pages_of(const Tensor& table, const CacheShape& c, std::int64_t b, std::int64_t begin,
                    std::int64_t end) {
  if (end <= begin) return;
  for (std::int64_t p = begin / c.page_size; p <= (end - 1) / c.page_size; ++p) {
    const std::int64_t id = at(table, b, p);
    if (id < 0 || id >= c.num_pages) {
      fail("kv.block_table[" + num(b) + ", " + num(p) + "]",
           "a page id in [0, " + num(c.num_pages) + ") (page id out of range)", num(id));
    }
  }
}

// Quantising divides by the scale: the pages an append writes need finite scales > 0.
void check_scales_of(const PagedKV& kv, const CacheShape& c, std::int64_t b, std::int64_t begin,
                     std::int64_t end) {
  if (end <= begin) return;
  for (std::int64_t p = begin / c.page_size; p <= (end - 1) / c.page_size; ++p) {
    const std::int64_t page = at(kv.block_table, b, p);
    for (const auto* s : {&kv.k_scale, &kv.v_scale}) {
      for (std::int64_t h = 0; h < c.heads_kv; ++h) {
        const float v = s->data_as<const float>()[page * s->stride(0) + h * s->stride(1)];
        if (!(v > 0.0f) || !std::isfinite(v)) {
          fail(std::string(s == &kv.k_scale ? "kv.k_scale" : "kv.v_scale") + "[" + num(page) +
                   ", " + num(h) + "]",
               "a finite scale > 0 (appended values are divided by it)", num_real(v));
        }
      }
    }
  }
}

// The queries are the last tokens of each sequence: only bottom-right alignment means anything.
MaskRule check_paged_mask(const Mask& mask, std::int64_t batch, std::int64_t heads_q,
                          const Device& device) {
  if (mask.align != CausalAlign::bottom_right) {
    fail("mask.align", "bottom_right (the queries are the last tokens of each sequence)",
         "top_left");
  }
  if (mask.diagonal_offset != 0) {
    fail("mask.diagonal_offset", "0 (the queries are the last tokens of each sequence)",
         num(mask.diagonal_offset));
  }
  return check_mask(mask, batch, heads_q, device);
}

// cu_seqlens_q i32 [batch + 1] (batch from the block table), read on the CPU: starts at 0, never
// decreases, each length <= max_seqlen_q, ends within the packed tokens.
void check_cu_seqlens_q(const PagedAttentionArgs& a, std::int64_t batch, const Device& device) {
  const Tensor& cu = a.cu_seqlens_q;
  expect_tensor("cu_seqlens_q", cu, 1, device, "q");
  expect_dtype_in("cu_seqlens_q", cu, {DType::i32});
  expect_size("cu_seqlens_q", cu, 0, batch + 1, "batch + 1, batch = kv.block_table.shape[0]");
  if (a.max_seqlen_q < 0) fail("max_seqlen_q", ">= 0", num(a.max_seqlen_q));
  if (!device.is_cpu()) return;
  if (at(cu, 0) != 0) fail("cu_seqlens_q[0]", "0", num(at(cu, 0)));
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t len = at(cu, b + 1) - at(cu, b);
    if (len < 0) {
      fail("cu_seqlens_q[" + num(b + 1) + "]", "non-decreasing offsets (>= " + num(at(cu, b)) + ")",
           num(at(cu, b + 1)));
    }
    if (len > a.max_seqlen_q) {
      fail("cu_seqlens_q", "every sequence length <= max_seqlen_q = " + num(a.max_seqlen_q),
           "length " + num(len) + " for sequence " + num(b));
    }
  }
  if (at(cu, batch) > a.q.size(0)) {
    fail("cu_seqlens_q[" + num(batch) + "]",
         "<= " + num(a.q.size(0)) + " (the packed query tokens)", num(at(cu, batch)));
  }
}

// seq_lens i32 [batch]; on the CPU each length holds the sequence's queries, fits its pages, and
// every page it uses exists. Returns the longest (or the table's capacity off the CPU).
std::int64_t check_seq_lens(const PagedAttentionArgs& a, const CacheShape& c, std::int64_t q_len,
                            bool packed, const Device& device) {
  const Tensor& lens = a.kv.seq_lens;
  expect_tensor("kv.seq_lens", lens, 1, device, "q");
  expect_dtype_in("kv.seq_lens", lens, {DType::i32});
  expect_size("kv.seq_lens", lens, 0, c.batch, "batch");
  const std::int64_t capacity = c.max_pages * c.page_size;
  if (!device.is_cpu()) return capacity;
  std::int64_t longest = 0;
  for (std::int64_t b = 0; b < c.batch; ++b) {
    const std::int64_t len = at(lens, b);
    const std::int64_t queries = packed ? at(a.cu_seqlens_q, b + 1) - at(a.cu_seqlens_q, b) : q_len;
    const std::string name = "kv.seq_lens[" + num(b) + "]";
    if (len < queries) {
      fail(name, ">= " + num(queries) + ", the sequence's query tokens (they must be in the cache)",
           num(len));
    }
    if (len > capacity) {
      fail(name,
           "<= max_pages * page_size = " + num(capacity) + " (sequence longer than its pages)",
           num(len));
    }
    check_pages_of(a.kv.block_table, c, b, 0, len);
    longest = std::max(longest, len);
  }
  return longest;
}

void check_lse(const Tensor& lse, std::int64_t batch, std::int64_t heads_q, std::int64_t q_len,
               std::int64_t total_q, bool packed, const Device& device) {
  expect_tensor("lse", lse, packed ? 2 : 3, device, "q");
  expect_dtype_in("lse", lse, {DType::f32});
  if (packed) {
    expect_size("lse", lse, 0, heads_q, "heads_q");
    expect_size("lse", lse, 1, total_q, "total_q, the packed query tokens");
  } else {
    expect_size("lse", lse, 0, batch, "batch");
    expect_size("lse", lse, 1, heads_q, "heads_q");
    expect_size("lse", lse, 2, q_len, "q_len");
  }
}

}  // namespace

PagedDims validate_paged(const PagedAttentionArgs& a, int processors) {
  const bool packed = a.cu_seqlens_q.defined();
  const int rank = packed ? 3 : 4;
  expect_tensor("q", a.q, rank, a.q.device(), "q");
  const Device device = a.q.device();
  expect_dtype_in("q", a.q, {DType::f32, DType::f16, DType::bf16});

  PagedDims d;
  d.varlen_q = packed;
  d.heads_q = a.q.size(rank - 2);
  d.head_dim = a.q.size(rank - 1);
  if (d.heads_q < 1) fail("q.shape[" + num(rank - 2) + "]", "at least 1 head", num(d.heads_q));
  if (d.head_dim < 1) fail("q.shape[" + num(rank - 1) + "]", "a head dim >= 1", num(d.head_dim));
  expect_defined("kv.block_table", a.kv.block_table);
  d.batch = packed ? a.cu_seqlens_q.size(0) - 1 : a.q.size(0);
  if (d.batch < 0) fail("cu_seqlens_q", "batch + 1 >= 1 offsets", "0");

  const CacheShape c = check_cache(a.kv, a.q.dtype(), d.batch, device, "q");
  d.heads_kv = c.heads_kv;
  d.num_pages = c.num_pages;
  d.page_size = c.page_size;
  d.max_pages = c.max_pages;
  d.fp8_kv = c.fp8;
  d.head_dim_v = c.head_dim_v;
  if (c.head_dim != d.head_dim) {
    fail("kv.k_pages.shape[3]", num(d.head_dim) + " (the head dim of q)", num(c.head_dim));
  }
  if (d.heads_q % d.heads_kv != 0) {
    fail("kv.k_pages.shape[2]",
         "a divisor of heads_q = " + num(d.heads_q) + " (GQA groups must be whole)",
         num(d.heads_kv));
  }

  if (packed) {
    check_cu_seqlens_q(a, d.batch, device);
    d.q_len = a.max_seqlen_q;
  } else {
    d.q_len = a.q.size(1);
  }
  const std::int64_t longest = check_seq_lens(a, c, d.q_len, packed, device);

  expect_tensor("out", a.out, rank, device, "q");
  expect_dtype_in("out", a.out, {DType::f64, DType::f32, DType::f16, DType::bf16});
  for (int i = 0; i < rank - 1; ++i) expect_size("out", a.out, i, a.q.size(i), "as in q");
  expect_size("out", a.out, rank - 1, d.head_dim_v, "the head dim of v");
  if (a.lse.defined()) check_lse(a.lse, d.batch, d.heads_q, d.q_len, a.q.size(0), packed, device);

  if (a.softmax_scale && !std::isfinite(*a.softmax_scale)) {
    fail("softmax_scale", "a finite number", std::to_string(*a.softmax_scale));
  }
  d.scale = a.softmax_scale ? double(*a.softmax_scale) : 1.0 / std::sqrt(double(d.head_dim));
  d.mask = check_paged_mask(a.mask, d.batch, d.heads_q, device);

  if (a.num_splits < 0) fail("num_splits", ">= 0 (0 lets the plan choose)", num(a.num_splits));
  d.num_splits = a.num_splits > 0 ? a.num_splits
                                  : plan_paged_split(d.batch, d.q_len, d.heads_q, d.heads_kv,
                                                     d.head_dim_v, longest, processors)
                                        .num_splits;
  if (a.workspace.defined()) {
    const Tensor& w = a.workspace;
    expect_device("workspace", w, device, "q");
    expect_dtype_in("workspace", w, {DType::f32});
    if (!w.is_contiguous()) fail("workspace", "a contiguous tensor", "a strided view");
    if (w.data() == nullptr && w.numel() > 0) fail("workspace.data", "a non-null pointer", "null");
    const std::int64_t rows = packed ? a.q.size(0) : d.batch * d.q_len;
    const std::int64_t need = paged_workspace_elems(d.num_splits, rows, d.heads_q, d.head_dim_v);
    if (w.numel() < need) {
      fail("workspace", ">= " + num(need) + " f32 elements for " + num(d.num_splits) + " splits",
           num(w.numel()));
    }
  }
  return d;
}

AppendDims validate_append(const AppendKVArgs& a) {
  expect_tensor("k_new", a.k_new, 4, a.k_new.device(), "k_new");
  const Device device = a.k_new.device();
  expect_tensor("v_new", a.v_new, 4, device, "k_new");
  expect_dtype_in("k_new", a.k_new, {DType::f32, DType::f16, DType::bf16});
  if (a.v_new.dtype() != a.k_new.dtype()) {
    fail("v_new.dtype", std::string(dtype_name(a.k_new.dtype())) + " (the dtype of k_new)",
         dtype_name(a.v_new.dtype()));
  }
  for (int i = 0; i < 3; ++i) expect_size("v_new", a.v_new, i, a.k_new.size(i), "as k_new");

  AppendDims d;
  d.batch = a.k_new.size(0);
  d.new_tokens = a.k_new.size(1);
  const CacheShape c = check_cache(a.kv, a.k_new.dtype(), d.batch, device, "k_new");
  expect_size("k_new", a.k_new, 2, c.heads_kv, "the KV heads of the pages");
  expect_size("k_new", a.k_new, 3, c.head_dim, "the head dim of the pages");
  expect_size("v_new", a.v_new, 3, c.head_dim_v, "the head dim of kv.v_pages");
  d.heads_kv = c.heads_kv;
  d.head_dim = c.head_dim;
  d.head_dim_v = c.head_dim_v;
  d.num_pages = c.num_pages;
  d.page_size = c.page_size;
  d.max_pages = c.max_pages;
  d.fp8_kv = c.fp8;

  expect_tensor("start_pos", a.start_pos, 1, device, "k_new");
  expect_dtype_in("start_pos", a.start_pos, {DType::i32});
  expect_size("start_pos", a.start_pos, 0, d.batch, "batch");
  if (!device.is_cpu()) return d;

  const std::int64_t capacity = c.max_pages * c.page_size;
  for (std::int64_t b = 0; b < d.batch; ++b) {
    const std::int64_t start = at(a.start_pos, b);
    if (start < 0 || start + d.new_tokens > capacity) {
      fail("start_pos[" + num(b) + "]",
           "0.." + num(capacity - d.new_tokens) + " (start + " + num(d.new_tokens) +
               " new tokens within max_pages * page_size = " + num(capacity) + ")",
           num(start));
    }
    check_pages_of(a.kv.block_table, c, b, start, start + d.new_tokens);
    if (c.fp8) check_scales_of(a.kv, c, b, start, start + d.new_tokens);
  }
  return d;
}

}  // namespace flashkit::core
