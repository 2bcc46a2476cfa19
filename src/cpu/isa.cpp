#include "cpu/isa.hpp"

namespace flashkit::cpu {

const char* isa_name() noexcept {
#if defined(__AVX512F__)
  return "x86-64 AVX-512";
#elif defined(__AVX2__)
  return "x86-64 AVX2";
#elif defined(__ARM_NEON)
  return "arm64 NEON";
#elif defined(__SSE2__)
  return "x86-64 SSE2";
#else
  return "generic";
#endif
}

}  // namespace flashkit::cpu
