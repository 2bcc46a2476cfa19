// The whole public API.
#pragma once

#include "flashkit/attention.hpp"
#include "flashkit/error.hpp"
#include "flashkit/info.hpp"
#include "flashkit/tensor.hpp"
