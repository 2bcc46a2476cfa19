// serve-sim's decode step on a GPU: one step of a batch of requests that share a cached prefix,
// timed with plain paged decode and with cascade attention, on synthetic KV of BENCH.md's decode
// settings (bf16, GQA 32 query / 8 KV heads, d 128, pages of 16 tokens; the prefix's pages shared
// in the pool, as the radix cache holds them). Built with the CUDA backend; elsewhere (and with no
// GPU visible) nothing is measured.
#pragma once

#include <cstdint>
#include <string>

namespace flashkit::app {

struct DecodeStepShape {
  std::int64_t batch = 0;   // requests decoding
  std::int64_t prefix = 0;  // tokens they share (found in the prefix cache)
  std::int64_t suffix = 0;  // each request's own tokens, its new one included
};

struct DecodeStepTiming {
  bool measured = false;
  std::string device;
  DecodeStepShape shape;
  double paged_ms = 0, cascade_ms = 0;  // median of 20 steps
  double paged_tokens_per_s() const { return paged_ms > 0 ? shape.batch / (paged_ms * 1e-3) : 0; }
  double cascade_tokens_per_s() const {
    return cascade_ms > 0 ? shape.batch / (cascade_ms * 1e-3) : 0;
  }
};

bool decode_step_gpu_present();
DecodeStepTiming time_decode_step(const DecodeStepShape& shape);

}  // namespace flashkit::app
