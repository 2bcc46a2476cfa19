// Per-CTA shared memory limits that pick the sm80-class kernels' tile shapes
// (sm80/fwd_tile_shape.hpp, bwd/sm80_bwd_tile_shape.hpp); the run-time value comes from
// tile_smem_limit() (common/device.hpp).
#pragma once

namespace flashkit::cuda {

constexpr int kSm80SmemLimit = 163 * 1024;  // the largest sm80 (A100) opt-in per CTA
constexpr int kSm90SmemLimit = 227 * 1024;  // sm90 (H100, H200)

}  // namespace flashkit::cuda
