// The in-process ring's shift: each rank gets its left neighbour's data, and a call that does
// not match across ranks throws on every rank instead of leaving one waiting.
#include <gtest/gtest.h>

#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "flashkit/error.hpp"
#include "flashkit/ring.hpp"

namespace flashkit::testing {
namespace {

// Runs body(rank) on one thread per rank; returns each rank's error message ("" if none).
template <class Body>
std::vector<std::string> on_every_rank(int ranks, Body body) {
  std::vector<std::string> errors(static_cast<std::size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (const Error& e) {
        errors[std::size_t(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

TEST(InProcessRing, EachRankReceivesItsLeftNeighboursData) {
  for (int ranks : {1, 2, 5}) {
    auto ring = make_in_process_ring(ranks);
    std::vector<std::vector<float>> got(std::size_t(ranks), std::vector<float>(3, -1.0f));
    on_every_rank(ranks, [&](int r) {
      std::vector<float> mine{float(r), float(10 * r), float(100 * r)};
      std::vector<float> held = mine;
      for (int step = 0; step < 2; ++step) {  // two steps: the data two ranks to the left
        std::vector<float> next(3);
        ring[std::size_t(r)]->shift(Tensor(held.data(), DType::f32, {3}),
                                    Tensor(next.data(), DType::f32, {3}), nullptr);
        held = next;
      }
      got[std::size_t(r)] = held;
    });
    for (int r = 0; r < ranks; ++r) {
      const float from = float((r - 2 + 2 * ranks) % ranks);
      EXPECT_EQ(got[std::size_t(r)], (std::vector<float>{from, 10 * from, 100 * from}))
          << ranks << " ranks, rank " << r;
    }
  }
}

TEST(InProcessRing, MismatchedSizesThrowOnEveryRank) {
  auto ring = make_in_process_ring(3);
  const auto errors = on_every_rank(3, [&](int r) {
    std::vector<float> send(r == 1 ? 5 : 4), recv(r == 1 ? 5 : 4);
    ring[std::size_t(r)]->shift(Tensor(send.data(), DType::f32, {std::int64_t(send.size())}),
                                Tensor(recv.data(), DType::f32, {std::int64_t(recv.size())}),
                                nullptr);
  });
  for (const std::string& e : errors)
    EXPECT_NE(e.find("one dtype and size on every rank"), std::string::npos) << e;
}

TEST(InProcessRing, ReceivingIntoASentBufferThrowsOnEveryRank) {
  auto ring = make_in_process_ring(2);
  std::vector<float> shared(4);
  const auto errors = on_every_rank(2, [&](int r) {
    std::vector<float> own(4);
    const Tensor mine(own.data(), DType::f32, {4}), common(shared.data(), DType::f32, {4});
    ring[std::size_t(r)]->shift(r == 0 ? common : mine, r == 0 ? mine : common, nullptr);
  });
  for (const std::string& e : errors)
    EXPECT_NE(e.find("overlapping rank 0's send"), std::string::npos) << e;
}

TEST(InProcessRing, AbortReleasesTheWaitingRanks) {
  auto ring = make_in_process_ring(3);
  const auto errors = on_every_rank(3, [&](int r) {
    if (r == 2) {
      ring[2]->abort();
      return;
    }
    float x = 0, y = 0;
    ring[std::size_t(r)]->shift(Tensor(&x, DType::f32, {1}), Tensor(&y, DType::f32, {1}), nullptr);
  });
  EXPECT_NE(errors[0].find("another rank's call failed"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("another rank's call failed"), std::string::npos) << errors[1];
  EXPECT_EQ(errors[2], "");
}

// One rank posting CUDA tensors and the other CPU ones: whether this build has no CUDA backend,
// has one but no device, or has a device, every rank throws at the posting check.
TEST(InProcessRing, MixedDevicesThrowOnEveryRank) {
  auto ring = make_in_process_ring(2);
  const auto errors = on_every_rank(2, [&](int r) {
    std::vector<float> send(4), recv(4);
    const Device device = r == 1 ? Device::cuda(0) : Device::cpu();
    ring[std::size_t(r)]->shift(Tensor(send.data(), DType::f32, {4}, device),
                                Tensor(recv.data(), DType::f32, {4}, device), nullptr);
  });
  for (const std::string& e : errors) {
    EXPECT_NE(e.find("ring shift: expected "), std::string::npos) << e;
    EXPECT_NE(e.find("rank 1"), std::string::npos) << e;
  }
}

TEST(InProcessRing, AtLeastOneRank) {
  try {
    make_in_process_ring(0);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "ranks");
  }
}

}  // namespace
}  // namespace flashkit::testing
