// Programmatic dependent launch (ptx/grid_dependency.cuh, common/dependent_launch.hpp): a
// consumer launched overlapping a slow producer starts before the producer ends, yet reads only
// what the producer wrote, because it waits for the producer's grid first.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "cuda/common/dependent_launch.hpp"
#include "cuda/ptx/grid_dependency.cuh"
#include "flashkit/error.hpp"
#include "gpu_check.hpp"

namespace flashkit::testing {
namespace {

constexpr int kBlocks = 8, kThreads = 128, kElems = kBlocks * kThreads;
constexpr std::uint64_t kSpinNs = 200000;  // the producer's 200 us: far above launch latency

__device__ std::uint64_t global_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

// Triggers its dependents at once, then writes data[i] = 3 i + 1 after kSpinNs.
__global__ void slow_producer(int* data, unsigned long long* end_ns) {
  cuda::ptx::launch_dependents();
  const std::uint64_t start = global_ns();
  while (global_ns() - start < kSpinNs) {
  }
  const int i = int(blockIdx.x) * kThreads + int(threadIdx.x);
  data[i] = 3 * i + 1;
  atomicMax(end_ns, static_cast<unsigned long long>(global_ns()));
}

// Stamps its start, waits for the producer's grid, then copies what it wrote.
__global__ void consumer(const int* data, int* out, unsigned long long* start_ns) {
  atomicMin(start_ns, static_cast<unsigned long long>(global_ns()));
  cuda::ptx::wait_for_prior_grid();
  const int i = int(blockIdx.x) * kThreads + int(threadIdx.x);
  out[i] = data[i];
}

struct Observed {
  std::vector<int> out;
  unsigned long long consumer_start, producer_end;
};

Observed produce_then_consume(bool overlap) {
  DeviceArray<int> data(std::vector<int>(kElems, -1)), out(std::vector<int>(kElems, -7));
  DeviceArray<unsigned long long> end(std::vector<unsigned long long>{0});
  DeviceArray<unsigned long long> start(std::vector<unsigned long long>{~0ull});
  cudaStream_t stream = nullptr;
  EXPECT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  slow_producer<<<kBlocks, kThreads, 0, stream>>>(data.get(), end.get());
  cuda::launch_overlapping(consumer, dim3(kBlocks), dim3(kThreads), 0, stream, overlap, "consumer",
                           static_cast<const int*>(data.get()), out.get(), start.get());
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaStreamDestroy(stream);
  return {out.to_host(), start.to_host()[0], end.to_host()[0]};
}

int capability() {
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  return major * 10 + minor;
}

void expect_producer_values(const std::vector<int>& out) {
  for (int i = 0; i < kElems; ++i) ASSERT_EQ(out[std::size_t(i)], 3 * i + 1) << "element " << i;
}

TEST(PtxGridDependency, OverlappingConsumerStartsEarlyAndReadsOnlyFinishedData) {
  if (capability() < 90) GTEST_SKIP() << "programmatic dependent launch needs sm90";
  const Observed r = produce_then_consume(true);
  expect_producer_values(r.out);
  EXPECT_LT(r.consumer_start, r.producer_end) << "the consumer did not overlap the producer";
}

TEST(PtxGridDependency, PlainLaunchKeepsStreamOrder) {
  const Observed r = produce_then_consume(false);
  expect_producer_values(r.out);
  EXPECT_GE(r.consumer_start, r.producer_end);
}

TEST(PtxGridDependency, EnabledFromSm90UnlessTurnedOff) {
  const char* env = std::getenv("FLASHKIT_DEPENDENT_LAUNCH");
  const std::optional<std::string> saved =
      env != nullptr ? std::optional<std::string>(env) : std::nullopt;
  unsetenv("FLASHKIT_DEPENDENT_LAUNCH");
  EXPECT_TRUE(cuda::dependent_launch_enabled(90));
  EXPECT_FALSE(cuda::dependent_launch_enabled(89));
  setenv("FLASHKIT_DEPENDENT_LAUNCH", "0", 1);
  EXPECT_FALSE(cuda::dependent_launch_enabled(90));
  setenv("FLASHKIT_DEPENDENT_LAUNCH", "yes", 1);
  try {
    cuda::dependent_launch_enabled(90);
    ADD_FAILURE() << "no error for FLASHKIT_DEPENDENT_LAUNCH=yes";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("FLASHKIT_DEPENDENT_LAUNCH"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("yes"), std::string::npos);
  }
  if (saved) {
    setenv("FLASHKIT_DEPENDENT_LAUNCH", saved->c_str(), 1);
  } else {
    unsetenv("FLASHKIT_DEPENDENT_LAUNCH");
  }
}

}  // namespace
}  // namespace flashkit::testing
