// FLASHKIT_SMEM_LIMIT_KB for the length of a scope: the sm80-class kernels then pick the tile
// shapes of a device whose CTAs may have that much shared memory (common/device.hpp:
// tile_smem_limit), so an H200 runs the shapes of a 163 KB A100.
#pragma once

#include <cstdlib>

namespace flashkit::testing {

class ScopedSmemLimit {
 public:
  explicit ScopedSmemLimit(const char* kb) { set(kb); }
  ~ScopedSmemLimit() { unsetenv(kVariable); }
  ScopedSmemLimit(const ScopedSmemLimit&) = delete;
  ScopedSmemLimit& operator=(const ScopedSmemLimit&) = delete;

  void set(const char* kb) { setenv(kVariable, kb, 1); }
  static constexpr const char* kVariable = "FLASHKIT_SMEM_LIMIT_KB";
};

}  // namespace flashkit::testing
