#include "serve_sim_workload.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "format.hpp"

namespace flashkit::app {
namespace {

// Token ids are drawn from a Llama-3-sized vocabulary, so two independent messages agree on their
// first page by chance essentially never, as with real text.
constexpr std::int64_t kVocabulary = 128256;

std::string range_text(const TokenRange& r) {
  return r.lo == r.hi
             ? format("%lld", static_cast<long long>(r.lo))
             : format("%lld-%lld", static_cast<long long>(r.lo), static_cast<long long>(r.hi));
}

}  // namespace

std::uint64_t Rng::next() {
  std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::int64_t Rng::uniform(std::int64_t lo, std::int64_t hi) {
  // The modulo bias is below 2^-40 for the ranges used here.
  return lo + std::int64_t(next() % std::uint64_t(hi - lo + 1));
}

double Rng::unit() {
  return double(next() >> 11) * 0x1.0p-53;
}

std::int64_t Rng::log_uniform(std::int64_t lo, std::int64_t hi) {
  // Message lengths are heavy-tailed: most are short, a few are long.
  const double x = std::exp(std::log(double(lo)) + unit() * std::log(double(hi + 1) / double(lo)));
  return std::clamp(std::int64_t(x), lo, hi);
}

std::vector<std::string> workload_names() {
  return {"chat", "multiturn", "fewshot", "agent"};
}

// The parameters are chosen to look like such traffic, not fitted to a trace: system prompts of
// 1-2k tokens, heavy-tailed user messages of tens to hundreds of tokens, answers of a few hundred,
// few-shot sets of several worked examples, agents whose tool outputs dominate their context. A
// decode step is taken as ~20 ms, so 300-3000 steps of think time are 6-60 s of a person reading
// and typing.
WorkloadSpec workload_spec(const std::string& name) {
  WorkloadSpec s;
  s.name = name;
  if (name == "chat") {
    s.shape = "one-turn chat: one of a few apps' system prompt + a user message";
    s.prefixes = 4;
    s.prefix = {1000, 2000};
    s.zipf = 1.0;
    s.first = {50, 1500};
    s.turns = {1, 1};
    s.output = {50, 400};
    s.open_sessions = 256;
  } else if (name == "multiturn") {
    s.shape = "conversations: each turn resends the whole conversation + a new user message";
    s.prefixes = 1;
    s.prefix = {100, 300};
    s.first = {20, 600};
    s.turns = {2, 12};
    s.follow_up = {20, 400};
    s.output = {50, 500};
    s.think = {300, 3000};
    s.open_sessions = 128;
  } else if (name == "fewshot") {
    s.shape = "few-shot evaluation: one task's k-shot examples + a short question";
    s.prefixes = 3;
    s.prefix = {2000, 3500};
    s.first = {30, 200};
    s.turns = {1, 1};
    s.output = {10, 200};
    s.open_sessions = 256;
  } else if (name == "agent") {
    s.shape =
        "tool loop: system prompt with tool schemas + task, then tool call / tool output rounds";
    s.prefixes = 1;
    s.prefix = {1500, 2500};
    s.first = {100, 400};
    s.turns = {4, 20};
    s.follow_up = {50, 1500};
    s.repeat = 0.25;  // re-reading a file, re-running a search
    s.output = {20, 150};
    s.think = {5, 100};  // tool latency, 0.1-2 s
    s.open_sessions = 32;
  } else {
    throw std::invalid_argument("unknown workload '" + name + "'");
  }
  return s;
}

std::string describe(const WorkloadSpec& s) {
  std::string text = format("%lld shared prefix%s of %s tok", static_cast<long long>(s.prefixes),
                            s.prefixes == 1 ? "" : "es", range_text(s.prefix).c_str());
  if (s.zipf > 0) text += format(" (zipf %.1f)", s.zipf);
  text += ", own part " + range_text(s.first) + " tok (log-uniform)";
  if (s.turns.hi > 1) {
    text += ", " + range_text(s.turns) + " turns adding " + range_text(s.follow_up) +
            " tok (log-uniform)";
    if (s.repeat > 0) text += format(", %.0f%% repeated", 100 * s.repeat);
    text += ", think " + range_text(s.think) + " steps";
  }
  text += ", output " + range_text(s.output) + " tok, " +
          format("%lld sessions open", static_cast<long long>(s.open_sessions));
  return text;
}

WorkloadGenerator::WorkloadGenerator(const WorkloadSpec& spec, std::uint64_t seed)
    : spec_(spec), rng_(seed) {
  double total = 0;
  for (std::int64_t i = 0; i < spec_.prefixes; ++i) {
    prefixes_.push_back(tokens(rng_.uniform(spec_.prefix.lo, spec_.prefix.hi)));
    total += std::pow(double(i + 1), -spec_.zipf);
    cumulative_.push_back(total);
  }
  for (double& c : cumulative_) c /= total;
}

std::vector<Token> WorkloadGenerator::tokens(std::int64_t n) {
  std::vector<Token> t(static_cast<std::size_t>(n));
  for (Token& x : t) x = Token(rng_.uniform(0, kVocabulary - 1));
  return t;
}

Request WorkloadGenerator::request(std::int64_t session_id, std::vector<Token> prompt) {
  Request r;
  r.session = session_id;
  r.prompt = std::move(prompt);
  r.output = tokens(rng_.uniform(spec_.output.lo, spec_.output.hi));
  return r;
}

Request WorkloadGenerator::start(std::int64_t session_id, Session& session) {
  const double u = rng_.unit();
  const auto k = std::size_t(std::upper_bound(cumulative_.begin(), cumulative_.end() - 1, u) -
                             cumulative_.begin());
  std::vector<Token> prompt = prefixes_[k];
  const std::vector<Token> own = tokens(rng_.log_uniform(spec_.first.lo, spec_.first.hi));
  prompt.insert(prompt.end(), own.begin(), own.end());
  session = Session{};
  session.turns_left = rng_.uniform(spec_.turns.lo, spec_.turns.hi) - 1;
  return request(session_id, std::move(prompt));
}

Request WorkloadGenerator::next(std::int64_t session_id, Session& session) {
  std::vector<Token> added;
  if (!session.follow_ups.empty() && rng_.unit() < spec_.repeat) {
    added =
        session
            .follow_ups[std::size_t(rng_.uniform(0, std::int64_t(session.follow_ups.size()) - 1))];
  } else {
    added = tokens(rng_.log_uniform(spec_.follow_up.lo, spec_.follow_up.hi));
  }
  session.follow_ups.push_back(added);
  --session.turns_left;
  std::vector<Token> prompt = session.context;
  prompt.insert(prompt.end(), added.begin(), added.end());
  return request(session_id, std::move(prompt));
}

void WorkloadGenerator::finish(Session& session, const Request& request) {
  session.context = request.prompt;
  session.context.insert(session.context.end(), request.output.begin(), request.output.end());
}

}  // namespace flashkit::app
