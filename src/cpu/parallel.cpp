#include "cpu/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace flashkit::cpu {

namespace {

// Set on threads while they run a body, so a nested parallel_for runs inline instead of waiting
// for the pool it is running on.
thread_local bool inside_pool = false;

class Pool {
 public:
  explicit Pool(int threads) {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { work(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
  }

  void run(std::int64_t n, const std::function<void(std::int64_t)>& body) {
    // One job at a time; a second caller waits here (the pool is shared by the process).
    std::lock_guard<std::mutex> job_lock(job_mutex_);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      body_ = &body;
      n_ = n;
      next_.store(0);
      error_ = nullptr;
      busy_ = int(workers_.size());
      ++generation_;
    }
    wake_.notify_all();
    drain();
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return busy_ == 0; });
    body_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void drain() {
    inside_pool = true;
    for (std::int64_t i = next_.fetch_add(1); i < n_; i = next_.fetch_add(1)) {
      try {
        (*body_)(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!error_) error_ = std::current_exception();
        next_.store(n_);  // stop handing out work
      }
    }
    inside_pool = false;
  }

  void work() {
    std::uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
        if (stopping_) return;
        seen = generation_;
      }
      drain();
      std::lock_guard<std::mutex> lock(mutex_);
      if (--busy_ == 0) done_.notify_one();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex job_mutex_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(std::int64_t)>* body_ = nullptr;
  std::int64_t n_ = 0;
  std::atomic<std::int64_t> next_{0};
  std::exception_ptr error_;
  int busy_ = 0;
  std::uint64_t generation_ = 0;
  bool stopping_ = false;
};

Pool& pool() {
  static Pool instance(num_threads());
  return instance;
}

}  // namespace

int num_threads() {
  if (const char* env = std::getenv("FLASHKIT_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

void parallel_for(std::int64_t n, const std::function<void(std::int64_t)>& body) {
  if (n <= 0) return;
  if (n == 1 || inside_pool || num_threads() == 1) {
    for (std::int64_t i = 0; i < n; ++i) body(i);
    return;
  }
  pool().run(n, body);
}

}  // namespace flashkit::cpu
