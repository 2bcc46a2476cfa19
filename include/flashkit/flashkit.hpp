// The whole public API.
#pragma once

#include "flashkit/attention.hpp"
#include "flashkit/cascade.hpp"
#include "flashkit/error.hpp"
#include "flashkit/fp8.hpp"
#include "flashkit/info.hpp"
#include "flashkit/kv_cache.hpp"
#include "flashkit/memory.hpp"
#include "flashkit/mla.hpp"
#include "flashkit/paged.hpp"
#include "flashkit/radix_cache.hpp"
#include "flashkit/ring.hpp"
#include "flashkit/rotary.hpp"
#include "flashkit/tensor.hpp"
