// The sgemm yardstick in a build without OpenBLAS: nothing to measure with.
#include "sgemm.hpp"

namespace flashkit::app {

std::optional<SgemmRate> measure_sgemm() {
  return std::nullopt;
}

}  // namespace flashkit::app
