// The loops between ring attention's attention calls. On the CPU, plain loops over strides (a
// shard's rows against the attention call's rows x keys); on CUDA, the kernels of
// cuda/ring_ops.cu queued on the call's stream.
#include <algorithm>
#include <cstdint>

#include "core/numeric.hpp"
#include "core/softmax_state.hpp"
#include "dist/ring_plan.hpp"
#if FLASHKIT_HAVE_CUDA
#include "cuda/ring_ops.hpp"
#endif

namespace flashkit::dist {

namespace {

char* shifted(const Tensor& t, std::int64_t elems) {
  return static_cast<char*>(t.data()) + elems * std::int64_t(dtype_size(t.dtype()));
}

std::int64_t at(const Tensor& t, std::int64_t b, std::int64_t i, std::int64_t h, std::int64_t e) {
  return b * t.stride(0) + i * t.stride(1) + h * t.stride(2) + e * t.stride(3);
}

}  // namespace

Tensor rows_of(const Tensor& t, std::int64_t start, std::int64_t len) {
  return Tensor(shifted(t, start * t.stride(1)), t.dtype(), {t.size(0), len, t.size(2), t.size(3)},
                {t.stride(0), t.stride(1), t.stride(2), t.stride(3)}, t.device());
}

Tensor lse_columns(const Tensor& lse, std::int64_t start, std::int64_t len) {
  return Tensor(shifted(lse, start * lse.stride(2)), lse.dtype(), {lse.size(0), lse.size(1), len},
                {lse.stride(0), lse.stride(1), lse.stride(2)}, lse.device());
}

void merge_partial(const Tensor& acc_o, const Tensor& acc_lse, const Tensor& part_o,
                   const Tensor& part_lse, const Tensor& out_o, const Tensor& out_lse,
                   void* stream) {
#if FLASHKIT_HAVE_CUDA
  if (acc_o.device().is_cuda())
    return cuda::ring_merge(acc_o, acc_lse, part_o, part_lse, out_o, out_lse, stream);
#endif
  (void)stream;
  const auto* ao = acc_o.data_as<const float>();
  const auto* al = acc_lse.data_as<const float>();
  const auto* po = part_o.data_as<const float>();
  const auto* pl = part_lse.data_as<const float>();
  auto* ol = out_lse.data_as<float>();
  auto lse_at = [](const Tensor& t, std::int64_t b, std::int64_t i, std::int64_t h) {
    return b * t.stride(0) + h * t.stride(1) + i * t.stride(2);
  };
  for (std::int64_t b = 0; b < acc_o.size(0); ++b) {
    for (std::int64_t i = 0; i < acc_o.size(1); ++i) {
      for (std::int64_t h = 0; h < acc_o.size(2); ++h) {
        const auto w = core::merge_weights(double(al[lse_at(acc_lse, b, i, h)]),
                                           double(pl[lse_at(part_lse, b, i, h)]));
        const bool part_seen = w.w_b != 0.0;  // else its o may hold anything: not read
        for (std::int64_t e = 0; e < acc_o.size(3); ++e) {
          double o = ao[at(acc_o, b, i, h, e)];
          if (part_seen) o = w.w_a * o + w.w_b * double(po[at(part_o, b, i, h, e)]);
          core::store_from_double(out_o.data(), out_o.dtype(), at(out_o, b, i, h, e), o);
        }
        // Written after the row's o: in place, out's lse is acc's.
        ol[lse_at(out_lse, b, i, h)] = part_seen ? float(w.lse) : al[lse_at(acc_lse, b, i, h)];
      }
    }
  }
}

void add_into(const Tensor& out, const Tensor& acc, const Tensor& part, void* stream) {
#if FLASHKIT_HAVE_CUDA
  if (acc.device().is_cuda()) return cuda::ring_add(out, acc, part, stream);
#endif
  (void)stream;
  const auto* a = acc.data_as<const float>();
  const auto* p = part.data_as<const float>();
  for (std::int64_t b = 0; b < acc.size(0); ++b) {
    for (std::int64_t i = 0; i < acc.size(1); ++i) {
      for (std::int64_t h = 0; h < acc.size(2); ++h) {
        for (std::int64_t e = 0; e < acc.size(3); ++e) {
          const double sum = double(a[at(acc, b, i, h, e)]) + double(p[at(part, b, i, h, e)]);
          core::store_from_double(out.data(), out.dtype(), at(out, b, i, h, e), sum);
        }
      }
    }
  }
}

void copy_into(const Tensor& dst, const Tensor& src, void* stream) {
#if FLASHKIT_HAVE_CUDA
  if (dst.device().is_cuda()) return cuda::ring_copy_into(dst, src, stream);
#endif
  (void)stream;
  const bool rank3 = dst.rank() == 3;  // lse [batch, heads, n]
  const std::int64_t n3 = rank3 ? 1 : dst.size(3);
  for (std::int64_t b = 0; b < dst.size(0); ++b) {
    for (std::int64_t i = 0; i < dst.size(1); ++i) {
      for (std::int64_t h = 0; h < dst.size(2); ++h) {
        for (std::int64_t e = 0; e < n3; ++e) {
          const std::int64_t s = b * src.stride(0) + i * src.stride(1) + h * src.stride(2) +
                                 (rank3 ? 0 : e * src.stride(3));
          const std::int64_t d = b * dst.stride(0) + i * dst.stride(1) + h * dst.stride(2) +
                                 (rank3 ? 0 : e * dst.stride(3));
          core::store_from_double(dst.data(), dst.dtype(), d,
                                  core::load_as_double(src.data(), src.dtype(), s));
        }
      }
    }
  }
}

void fill(const Tensor& t, float value, void* stream) {
#if FLASHKIT_HAVE_CUDA
  if (t.device().is_cuda()) return cuda::ring_fill(t, value, stream);
#endif
  (void)stream;
  auto* x = t.data_as<float>();
  for (std::int64_t b = 0; b < t.size(0); ++b) {
    for (std::int64_t i = 0; i < t.size(1); ++i) {
      for (std::int64_t h = 0; h < t.size(2); ++h) {
        for (std::int64_t e = 0; e < t.size(3); ++e) x[at(t, b, i, h, e)] = value;
      }
    }
  }
}

}  // namespace flashkit::dist
