#include <cstdint>
#include <limits>
#include <vector>

#include "core/numeric.hpp"
#include "core/softmax_state.hpp"
#include "cpu/cpu_backend.hpp"
#include "cpu/parallel.hpp"

namespace flashkit::cpu {

void merge(const MergeArgs& args, const core::MergeDims& m) {
  const Tensor& so = args.states_o;
  const Tensor& sl = args.states_lse;
  parallel_for(m.tokens, [&](std::int64_t t) {
    std::vector<double> acc(static_cast<std::size_t>(m.head_dim));
    for (std::int64_t h = 0; h < m.heads; ++h) {
      double acc_lse = -std::numeric_limits<double>::infinity();
      std::fill(acc.begin(), acc.end(), 0.0);
      for (std::int64_t s = 0; s < m.states; ++s) {
        const double lse =
            sl.data_as<const float>()[s * sl.stride(0) + t * sl.stride(1) + h * sl.stride(2)];
        const auto w = core::merge_weights(acc_lse, lse);
        if (w.w_b == 0.0) continue;  // an empty state: o_s may hold anything
        const std::int64_t base = s * so.stride(0) + t * so.stride(1) + h * so.stride(2);
        for (std::int64_t e = 0; e < m.head_dim; ++e) {
          auto& a = acc[static_cast<std::size_t>(e)];
          a = w.w_a * a + w.w_b * core::load_as_double(so.data(), so.dtype(), base + e);
        }
        acc_lse = w.lse;
      }
      const Tensor& out = args.out;
      const std::int64_t obase = t * out.stride(0) + h * out.stride(1);
      for (std::int64_t e = 0; e < m.head_dim; ++e) {
        core::store_from_double(out.data(), out.dtype(), obase + e,
                                acc[static_cast<std::size_t>(e)]);
      }
      if (args.out_lse.defined()) {
        const Tensor& ol = args.out_lse;
        ol.data_as<float>()[t * ol.stride(0) + h * ol.stride(1)] = float(acc_lse);
      }
    }
  });
}

}  // namespace flashkit::cpu
