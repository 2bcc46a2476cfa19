// FLOP and DRAM-byte models shared by every benchmark, so all reports count the same way.
#pragma once

#include <cstdint>

namespace flashkit::core {

struct AttentionSize {
  std::int64_t batch, heads, seqlen_q, seqlen_k, head_dim;
  bool causal;
};

// Forward FLOPs: two GEMMs of 2*Nq*Nk*d each, halved when causal (BENCH.md convention).
inline double forward_flops(const AttentionSize& s) {
  const double f = 4.0 * double(s.batch) * double(s.heads) * double(s.seqlen_q) *
                   double(s.seqlen_k) * double(s.head_dim);
  return s.causal ? f / 2 : f;
}

// Backward FLOPs: 2.5x the forward (five GEMMs against two).
inline double backward_flops(const AttentionSize& s) {
  return 2.5 * forward_flops(s);
}

// Compulsory traffic of a fused (flash) forward: read Q, K, V once, write O once.
inline double flash_forward_bytes(const AttentionSize& s, double elem_bytes) {
  const double per_head =
      2.0 * double(s.seqlen_q) * double(s.head_dim) + 2.0 * double(s.seqlen_k) * double(s.head_dim);
  return double(s.batch) * double(s.heads) * per_head * elem_bytes;
}

// The naive three-step forward: S = QK^T (read Q, K, write S), P = softmax(S) (read S, write P),
// O = PV (read P, V, write O): 4*Nq*Nk score elements on top of the flash traffic.
inline double naive_forward_bytes(const AttentionSize& s, double elem_bytes, double score_bytes) {
  const double scores = 4.0 * double(s.batch) * double(s.heads) * double(s.seqlen_q) *
                        double(s.seqlen_k) * score_bytes;
  return scores + flash_forward_bytes(s, elem_bytes);
}

// Keys per block of the FA1 kernel (cuda/lineage/fa1.cu), which sets how often its loop order
// sends the query rows' state through memory.
constexpr int kFa1KeyBlock = 16;

// The FA1 loop order (KV blocks outer, query blocks inner): K and V read once; for every key
// block each query row reads Q and its fp32 state (O, m, l) and writes the state back (the kernel
// skips no block, causal or not); the state is zeroed first, then read once more to write O.
inline double fa1_forward_bytes(const AttentionSize& s, double elem_bytes) {
  const double key_blocks = double((s.seqlen_k + kFa1KeyBlock - 1) / kFa1KeyBlock);
  const double d = double(s.head_dim), state_bytes = (d + 2.0) * 4.0;  // O, m, l in fp32
  const double per_head = 2.0 * double(s.seqlen_k) * d * elem_bytes +
                          double(s.seqlen_q) * (2.0 * state_bytes + d * elem_bytes) +
                          key_blocks * double(s.seqlen_q) * (d * elem_bytes + 2.0 * state_bytes);
  return double(s.batch) * double(s.heads) * per_head;
}

// Memory the naive forward holds at once: S and P for every (batch, head).
inline double naive_workspace_bytes(const AttentionSize& s, double score_bytes) {
  return 2.0 * double(s.batch) * double(s.heads) * double(s.seqlen_q) * double(s.seqlen_k) *
         score_bytes;
}

}  // namespace flashkit::core
