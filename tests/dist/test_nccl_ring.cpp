// make_nccl_ring's arguments, checked before NCCL is touched (the ring itself runs in
// tests/gpu/test_ring_cuda.cpp, which needs a GPU per rank).
#include <gtest/gtest.h>

#include <string>

#include "flashkit/error.hpp"
#include "flashkit/info.hpp"
#include "flashkit/ring.hpp"

namespace flashkit::testing {
namespace {

std::string argument_of(int ranks, int rank) {
  try {
    make_nccl_ring(NcclRingId{}, ranks, rank);
  } catch (const Error& e) {
    return e.argument();
  }
  return "no error";
}

TEST(NcclRing, BadRanksAreNamedOrTheBuildSaysItHasNoNccl) {
  if (!build_info().nccl) {
    EXPECT_EQ(argument_of(2, 0), "id");
    try {
      nccl_ring_id();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("a build with NCCL"), std::string::npos) << e.what();
    }
    return;
  }
  EXPECT_EQ(argument_of(0, 0), "ranks");
  EXPECT_EQ(argument_of(2, 2), "rank");
  EXPECT_EQ(argument_of(2, -1), "rank");
}

}  // namespace
}  // namespace flashkit::testing
