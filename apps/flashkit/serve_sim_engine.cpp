#include "serve_sim_engine.hpp"

#include <algorithm>
#include <deque>
#include <functional>
#include <queue>
#include <stdexcept>
#include <utility>
#include <vector>

#include "flashkit/kv_cache.hpp"
#include "flashkit/radix_cache.hpp"

namespace flashkit::app {
namespace {

class Server {
 public:
  Server(const WorkloadSpec& spec, const SimConfig& config)
      : spec_(spec),
        config_(config),
        alloc_(config.pages, config.page_size),
        cache_(alloc_),
        gen_(spec, config.seed) {}

  SimResult run() {
    for (std::int64_t i = 0; i < spec_.open_sessions && issued_ < config_.requests; ++i) {
      open_session();
    }
    while (done_ < config_.requests) {
      while (!waiting_.empty() && waiting_.top().first <= step_) {
        const std::int64_t id = waiting_.top().second;
        waiting_.pop();
        ready_.push_back(gen_.next(id, sessions_[std::size_t(id)]));
      }
      while (std::int64_t(running_.size()) < config_.max_batch && !ready_.empty() &&
             admit(ready_.front())) {
        ready_.pop_front();
      }
      if (running_.empty()) {
        if (!ready_.empty()) {  // nothing runs and it still does not fit: it never will
          ++result_.rejected;
          ++done_;
          sessions_[std::size_t(ready_.front().session)].turns_left = 0;  // its context is lost
          end_turn(ready_.front().session);
          ready_.pop_front();
        } else if (!waiting_.empty()) {
          step_ = std::max(step_, waiting_.top().first);  // idle until the next arrival
        }
        continue;
      }
      decode();
      sample();
      ++step_;
    }
    result_.evicted_pages = cache_.stats().evicted_pages;
    result_.pages_end = alloc_.num_pages() - alloc_.free_pages();
    if (samples_ > 0) {
      result_.utilisation = stored_sum_ / capacity_sum_;
      result_.pages_mean = used_sum_ / double(samples_);
      result_.batch_mean = running_sum_ / double(samples_);
    }
    if (running_sum_ > 0) {
      result_.matched_mean = matched_sum_ / running_sum_;
      result_.own_mean = own_sum_ / running_sum_;
    }
    return result_;
  }

 private:
  struct Running {
    Request request;
    SeqId seq;
    RadixNodeHandle node;  // the matched prefix, locked while the request runs
    std::int64_t matched;
    std::int64_t length;    // tokens in the cache
    std::int64_t reserved;  // pages promised to its remaining decode steps
  };

  std::int64_t pages_for(std::int64_t tokens) const {
    return (tokens + config_.page_size - 1) / config_.page_size;
  }

  void open_session() {
    const auto id = std::int64_t(sessions_.size());
    sessions_.emplace_back();
    ready_.push_back(gen_.start(id, sessions_.back()));
    ++issued_;
  }

  // The session's next turn after its think time, or a new session in its place.
  void end_turn(std::int64_t id) {
    Session& s = sessions_[std::size_t(id)];
    if (s.turns_left > 0 && issued_ < config_.requests) {
      waiting_.push({step_ + gen_.think(), id});
      ++issued_;
    } else if (issued_ < config_.requests) {
      open_session();
    }
  }

  // Admits a request when its whole lifetime fits: the prompt's pages now and every decode page
  // later, counting the cache's unlocked pages as free (they can be evicted) and the pages already
  // promised to running requests as taken. So decoding never runs out of memory and nothing is
  // preempted.
  bool admit(const Request& r) {
    // The prompt's last token is always computed: its logits give the first output token.
    const std::vector<Token> reusable(r.prompt.begin(), r.prompt.end() - 1);
    const auto cached = std::int64_t(cache_.lookup(reusable).size());
    const std::int64_t total = pages_for(std::int64_t(r.prompt.size() + r.output.size()));
    const std::int64_t available =
        alloc_.free_pages() + cache_.evictable_pages() - cached - reserved_;
    if (total - cached > available) return false;

    const PrefixMatch m = cache_.match_prefix(reusable);
    cache_.lock(m.node);
    const SeqId seq = alloc_.create_with_prefix(m.pages, m.length);
    const std::int64_t prompt_pages =
        pages_for(std::int64_t(r.prompt.size())) - std::int64_t(m.pages.size());
    make_room(prompt_pages);
    alloc_.append(seq, std::int64_t(r.prompt.size()) - m.length);
    const std::int64_t reserved = total - std::int64_t(m.pages.size()) - prompt_pages;
    reserved_ += reserved;
    running_.push_back(Running{r, seq, m.node, m.length, std::int64_t(r.prompt.size()), reserved});
    result_.prompt_tokens += std::int64_t(r.prompt.size());
    result_.matched_tokens += m.length;
    return true;
  }

  void make_room(std::int64_t pages) {
    const std::int64_t short_by = pages - alloc_.free_pages();
    if (short_by > 0) cache_.evict(short_by);
    // Admission promised these pages, and every unlocked cached page is the cache's alone.
    if (alloc_.free_pages() < pages) throw std::logic_error("serve-sim: page accounting broken");
  }

  void decode() {
    for (Running& r : running_) {
      if (r.length % config_.page_size == 0) {
        make_room(1);
        --r.reserved;
        --reserved_;
      }
      alloc_.append(r.seq, 1);
      ++r.length;
      ++result_.decode_tokens;
    }
    // Finished requests go into the cache whole, prompt and output, for later turns to reuse.
    auto finished = std::stable_partition(running_.begin(), running_.end(), [](const Running& r) {
      return r.length < std::int64_t(r.request.prompt.size() + r.request.output.size());
    });
    for (auto it = finished; it != running_.end(); ++it) {
      std::vector<Token> sequence = it->request.prompt;
      sequence.insert(sequence.end(), it->request.output.begin(), it->request.output.end());
      cache_.insert(sequence, alloc_.pages(it->seq));
      cache_.unlock(it->node);
      alloc_.free(it->seq);  // pages the cache already had from another request go back here
      WorkloadGenerator::finish(sessions_[std::size_t(it->request.session)], it->request);
      ++result_.requests;
      ++done_;
      end_turn(it->request.session);
    }
    running_.erase(finished, running_.end());
  }

  void sample() {
    const std::int64_t used = alloc_.num_pages() - alloc_.free_pages();
    // Cached pages are always full; a running request adds its own tokens past its match.
    double stored = double(cache_.stats().pages_held * config_.page_size);
    for (const Running& r : running_) {
      stored += double(r.length - r.matched);
      matched_sum_ += double(r.matched);
      own_sum_ += double(r.length - r.matched);
    }
    running_sum_ += double(running_.size());
    stored_sum_ += stored;
    capacity_sum_ += double(used * config_.page_size);
    used_sum_ += double(used);
    result_.pages_peak = std::max(result_.pages_peak, used);
    ++samples_;
    ++result_.steps;
  }

  const WorkloadSpec spec_;
  const SimConfig config_;
  BlockAllocator alloc_;
  RadixCache cache_;
  WorkloadGenerator gen_;
  std::vector<Session> sessions_;  // by id
  std::deque<Request> ready_;
  // (arrival step, session): a min-heap, ties by session id so the order is deterministic.
  std::priority_queue<std::pair<std::int64_t, std::int64_t>,
                      std::vector<std::pair<std::int64_t, std::int64_t>>, std::greater<>>
      waiting_;
  std::vector<Running> running_;
  std::int64_t step_ = 0, issued_ = 0, done_ = 0, reserved_ = 0;
  double stored_sum_ = 0, capacity_sum_ = 0, used_sum_ = 0;
  double running_sum_ = 0, matched_sum_ = 0, own_sum_ = 0;
  std::int64_t samples_ = 0;
  SimResult result_;
};

}  // namespace

SimResult simulate(const WorkloadSpec& spec, const SimConfig& config) {
  return Server(spec, config).run();
}

}  // namespace flashkit::app
