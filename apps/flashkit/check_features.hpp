// The feature checks of `flashkit check` (MLA, FP8, ring attention, rotary embedding).
#pragma once

#include <random>

namespace flashkit::app {

// Prints a PASS / FAIL line per feature; returns the number that failed.
int run_feature_checks(std::mt19937& rng);

}  // namespace flashkit::app
