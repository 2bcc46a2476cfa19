// Checks that a call throws flashkit::Error about a given argument (every validation test).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "flashkit/error.hpp"

namespace flashkit::testing {

// Runs `call`, expects flashkit::Error about `argument` whose message also says `fragment`.
inline void expect_error(const std::function<void()>& call, const std::string& argument,
                         const std::string& fragment = "") {
  try {
    call();
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), argument) << e.what();
    EXPECT_NE(std::string(e.what()).find(argument), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("expected"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    return;
  }
  ADD_FAILURE() << "no flashkit::Error about " << argument;
}

}  // namespace flashkit::testing
