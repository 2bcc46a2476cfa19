// The yardstick of the lineage bench: this machine's fp32 matrix-multiply rate, measured in the
// same run, so flash's GFLOP/s can be read as a fraction of what the hardware does on a GEMM.
#pragma once

#include <optional>
#include <string>

namespace flashkit::app {

struct SgemmRate {
  double gflops;
  std::string library;  // "OpenBLAS 0.3.21 ... (2 threads)"
  std::string warning;  // non-empty when the rate understates the machine, and why
};

// Median rate of a square sgemm; nullopt in a build without OpenBLAS (sgemm_absent.cpp).
std::optional<SgemmRate> measure_sgemm();

}  // namespace flashkit::app
