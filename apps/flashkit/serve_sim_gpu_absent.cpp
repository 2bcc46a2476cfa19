// serve-sim without the CUDA backend: no decode step to time.
#include "serve_sim_gpu.hpp"

namespace flashkit::app {

bool decode_step_gpu_present() {
  return false;
}

DecodeStepTiming time_decode_step(const DecodeStepShape& shape) {
  DecodeStepTiming t;
  t.shape = shape;
  return t;
}

}  // namespace flashkit::app
