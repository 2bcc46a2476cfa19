#include "cuda/bwd/bwd.hpp"

#include <cstdint>

#include "cuda/bwd/bwd_kernels.hpp"
#include "cuda/common/stream_buffer.hpp"

namespace flashkit::cuda {

void backward_simt(const BwdParams& params, cudaStream_t stream) {
  const std::int64_t rows = std::int64_t(params.f.batch) * params.f.heads_q * params.f.seqlen_q;
  StreamBuffer d_rows(std::size_t(rows) * sizeof(float), stream);
  BwdParams p = params;
  p.d_rows = d_rows.as<float>();
  if (rows > 0) launch_bwd_dot(p, stream);
  launch_bwd_dkdv(p, stream);
  launch_bwd_dq(p, stream);
}

}  // namespace flashkit::cuda
