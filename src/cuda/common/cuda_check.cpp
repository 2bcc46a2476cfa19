#include "cuda/common/cuda_check.hpp"

#include <string>

#include "flashkit/error.hpp"

namespace flashkit::cuda {

void check_cuda(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  throw Error(std::string(what) + ": CUDA error " + cudaGetErrorName(status) + ": " +
              cudaGetErrorString(status));
}

}  // namespace flashkit::cuda
