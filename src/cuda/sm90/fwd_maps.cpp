#include "cuda/sm90/fwd_maps.hpp"

#include <cstdint>
#include <vector>

#include "cuda/common/tensor_map.hpp"

namespace flashkit::cuda::sm90 {
namespace {

// The strides of a map's dims 1.., where a dimension of extent 1 is never stepped over but its
// stride must still be a valid TMA stride (a multiple of 16 bytes): it gets the packed one.
std::vector<std::uint64_t> valid_strides(const std::vector<std::uint64_t>& dims,
                                         std::vector<std::uint64_t> strides, std::uint64_t elem) {
  std::uint64_t packed = dims[0] * elem;
  for (std::size_t i = 0; i < strides.size(); ++i) {
    if (dims[i + 1] == 1) strides[i] = packed;
    packed = strides[i] * dims[i + 1];
  }
  return strides;
}

// t is [batch, tokens, heads, d] or packed [tokens, heads, d] (varlen).
CUtensorMap map_of(const Tensor& t, bool varlen, std::uint32_t box_tokens) {
  const int r = t.rank();
  const std::uint64_t elem = dtype_size(t.dtype());
  const std::uint64_t d = t.size(r - 1), heads = t.size(r - 2), tokens = t.size(r - 3);
  const std::uint64_t batch = varlen ? 1 : t.size(0);
  TensorMapSpec spec;
  spec.base = t.data();
  spec.dtype = t.dtype();
  spec.dims = {d, heads, tokens, batch};
  spec.strides_bytes =
      valid_strides(spec.dims,
                    {std::uint64_t(t.stride(r - 2)) * elem, std::uint64_t(t.stride(r - 3)) * elem,
                     varlen ? 0 : std::uint64_t(t.stride(0)) * elem},
                    elem);
  spec.box = {64, 1, box_tokens, 1};
  spec.swizzle = ptx::Swizzle::b128;
  return make_tensor_map(spec);
}

// q [batch, q_len, heads_q, d] as [batch, q_len, heads_q / pack, pack, d]: a box of tokens x pack
// rows is a tile of packed rows (fwd_kv_source.cuh).
CUtensorMap packed_q_map(const Tensor& q, std::uint64_t pack, std::uint32_t block_m) {
  const std::uint64_t elem = dtype_size(q.dtype());
  TensorMapSpec spec;
  spec.base = q.data();
  spec.dtype = q.dtype();
  spec.dims = {std::uint64_t(q.size(3)), pack, std::uint64_t(q.size(2)) / pack,
               std::uint64_t(q.size(1)), std::uint64_t(q.size(0))};
  spec.strides_bytes =
      valid_strides(spec.dims,
                    {std::uint64_t(q.stride(2)) * elem, std::uint64_t(q.stride(2)) * pack * elem,
                     std::uint64_t(q.stride(1)) * elem, std::uint64_t(q.stride(0)) * elem},
                    elem);
  spec.box = {64, std::uint32_t(pack), 1, block_m / std::uint32_t(pack), 1};
  spec.swizzle = ptx::Swizzle::b128;
  return make_tensor_map(spec);
}

// pages [num_pages, page_size, heads_kv, d]: boxes of box_rows slots of one page and head.
CUtensorMap page_map(const Tensor& pages, std::uint32_t box_rows) {
  const std::uint64_t elem = dtype_size(pages.dtype());
  TensorMapSpec spec;
  spec.base = pages.data();
  spec.dtype = pages.dtype();
  spec.dims = {std::uint64_t(pages.size(3)), std::uint64_t(pages.size(2)),
               std::uint64_t(pages.size(1)), std::uint64_t(pages.size(0))};
  spec.strides_bytes =
      valid_strides(spec.dims,
                    {std::uint64_t(pages.stride(2)) * elem, std::uint64_t(pages.stride(1)) * elem,
                     std::uint64_t(pages.stride(0)) * elem},
                    elem);
  spec.box = {64, 1, box_rows, 1};
  spec.swizzle = ptx::Swizzle::b128;
  return make_tensor_map(spec);
}

}  // namespace

FwdMaps make_paged_fwd_maps(const PagedAttentionArgs& a, int q_pack, int block_m, int box_rows,
                            bool store_out) {
  FwdMaps m;
  m.q = packed_q_map(a.q, std::uint64_t(q_pack), std::uint32_t(block_m));
  m.k = box_rows > 0 ? page_map(a.kv.k_pages, std::uint32_t(box_rows)) : CUtensorMap{};
  m.v = box_rows > 0 ? page_map(a.kv.v_pages, std::uint32_t(box_rows)) : CUtensorMap{};
  m.out = store_out ? map_of(a.out, false, 64) : CUtensorMap{};
  return m;
}

FwdMaps make_fwd_maps(const AttentionArgs& a, const core::ProblemDims& d, int block_m,
                      int block_n) {
  FwdMaps m;
  m.q = map_of(a.q, d.varlen, std::uint32_t(block_m));
  m.k = map_of(a.k, d.varlen, std::uint32_t(block_n));
  m.v = map_of(a.v, d.varlen, std::uint32_t(block_n));
  // Each consumer warpgroup stores its own 64 rows. An f32 output is written from registers (its
  // 256-byte rows exceed the 128-byte swizzle).
  m.out = a.out.dtype() == a.q.dtype() ? map_of(a.out, d.varlen, 64) : CUtensorMap{};
  return m;
}

}  // namespace flashkit::cuda::sm90
