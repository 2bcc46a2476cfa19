// The decode kernels for e4m3 pages (every head dim and row tile of decode_shape.cuh), one
// translation unit per KV dtype so a build compiles the three in parallel.
#include "cuda/decode/decode_launch.cuh"

namespace flashkit::cuda::decode {

template void launch_decode<__nv_fp8_e4m3>(const PagedParams&, cudaStream_t);

}  // namespace flashkit::cuda::decode
