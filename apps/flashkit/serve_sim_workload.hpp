// serve-sim's synthetic workloads: sessions of requests whose prompts share prefixes the way
// real traffic does (a system prompt, a few-shot set, a growing conversation or agent context).
// All randomness comes from one seeded generator, so a seed gives the same requests everywhere.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flashkit/radix_cache.hpp"

namespace flashkit::app {

// SplitMix64: tiny, fast and specified bit for bit (std::uniform_int_distribution is not).
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next();
  std::int64_t uniform(std::int64_t lo, std::int64_t hi);      // inclusive
  std::int64_t log_uniform(std::int64_t lo, std::int64_t hi);  // inclusive, lo >= 1
  double unit();                                               // [0, 1)

 private:
  std::uint64_t state_;
};

struct TokenRange {
  std::int64_t lo = 0, hi = 0;
};

// One workload's parameters; every count is in tokens unless named otherwise.
struct WorkloadSpec {
  std::string name;
  std::string shape;          // one line: what the traffic is
  std::int64_t prefixes = 1;  // distinct shared prefixes (system prompts, few-shot sets)
  TokenRange prefix;          // uniform
  double zipf = 0;            // popularity of the prefixes: weight 1 / rank^zipf
  TokenRange first;           // the session's own part of its first prompt, log-uniform
  TokenRange turns;           // requests per session, uniform
  TokenRange follow_up;       // added to the context before each later turn, log-uniform
  double repeat = 0;          // chance that a follow-up repeats one of the session's earlier ones
  TokenRange output;          // decoded per request, uniform
  TokenRange think;           // decode steps from a turn's end to the next turn's arrival
  std::int64_t open_sessions = 1;  // sessions in progress at once
};

std::vector<std::string> workload_names();  // chat, multiturn, fewshot, agent
WorkloadSpec workload_spec(const std::string& name);
// The parameters in one line, for the report.
std::string describe(const WorkloadSpec& spec);

struct Session {
  std::vector<Token> context;  // every token so far; the next prompt starts with it
  std::int64_t turns_left = 0;
  std::vector<std::vector<Token>> follow_ups;  // earlier ones, for repeats
};

struct Request {
  std::int64_t session = 0;
  std::vector<Token> prompt;
  std::vector<Token> output;  // the tokens "decoded", drawn up front
};

// Draws sessions and their requests for one workload.
class WorkloadGenerator {
 public:
  WorkloadGenerator(const WorkloadSpec& spec, std::uint64_t seed);

  // A new session and its first request.
  Request start(std::int64_t session_id, Session& session);
  // The session's next request (session.turns_left > 0), after its previous one finished.
  Request next(std::int64_t session_id, Session& session);
  // Think time before the next turn, in decode steps.
  std::int64_t think() { return rng_.uniform(spec_.think.lo, spec_.think.hi); }
  // Records a finished request: its prompt and output become the session's context.
  static void finish(Session& session, const Request& request);

 private:
  std::vector<Token> tokens(std::int64_t n);
  Request request(std::int64_t session_id, std::vector<Token> prompt);

  WorkloadSpec spec_;
  Rng rng_;
  std::vector<std::vector<Token>> prefixes_;
  std::vector<double> cumulative_;  // prefix popularity, normalised to end at 1
};

}  // namespace flashkit::app
