#include "cuda/sm90/fwd_maps.hpp"

#include <cstdint>

#include "cuda/common/tensor_map.hpp"

namespace flashkit::cuda::sm90 {
namespace {

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
  std::uint64_t strides[3] = {std::uint64_t(t.stride(r - 2)) * elem,
                              std::uint64_t(t.stride(r - 3)) * elem,
                              varlen ? 0 : std::uint64_t(t.stride(0)) * elem};
  // A dimension of extent 1 is never stepped over, but its stride must still be a valid TMA
  // stride (a multiple of 16 bytes): give it the packed one.
  std::uint64_t packed = d * elem;
  for (int i = 0; i < 3; ++i) {
    if (spec.dims[i + 1] == 1) strides[i] = packed;
    packed = strides[i] * spec.dims[i + 1];
  }
  spec.strides_bytes = {strides[0], strides[1], strides[2]};
  spec.box = {64, 1, box_tokens, 1};
  spec.swizzle = ptx::Swizzle::b128;
  return make_tensor_map(spec);
}

}  // namespace

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
