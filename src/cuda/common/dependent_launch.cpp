#include "cuda/common/dependent_launch.hpp"

#include <cstdlib>
#include <string>

#include "core/validate.hpp"

namespace flashkit::cuda {

bool dependent_launch_enabled(int capability) {
  const char* env = std::getenv("FLASHKIT_DEPENDENT_LAUNCH");
  const std::string value = env != nullptr ? env : "1";
  if (value != "0" && value != "1") {
    core::fail("FLASHKIT_DEPENDENT_LAUNCH", "0 or 1 (or unset)", value);
  }
  return value == "1" && capability >= 90;
}

}  // namespace flashkit::cuda
