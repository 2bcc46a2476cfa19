#pragma once

namespace flashkit::cpu {

// The vector instruction set the CPU kernels were compiled for (FLASHKIT_NATIVE decides).
const char* isa_name() noexcept;

}  // namespace flashkit::cpu
