// The decode kernels for f16 pages (every head dim and row tile of decode_shape.cuh), one
// translation unit per KV dtype so a build compiles the three in parallel.
#include "cuda/decode/decode_launch.cuh"

namespace flashkit::cuda::decode {

template void launch_decode<__half>(const PagedParams&, cudaStream_t);

}  // namespace flashkit::cuda::decode
