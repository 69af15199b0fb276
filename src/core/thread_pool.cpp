#include "core/thread_pool.h"

#include <algorithm>

namespace ga {

namespace {
constexpr int kSpinIterations = 20000;  // ~tens of microseconds before a worker sleeps
}

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  n_threads_ = n_threads;
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    ++generation_;
    published_.store(generation_, std::memory_order_release);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunk(int index) {
  const int64_t begin = std::min(n_, chunk_ * index);
  const int64_t end = std::min(n_, begin + chunk_);
  if (begin >= end) return;
  try {
    (*fn_)(begin, end, index);
  } catch (...) {
    std::lock_guard<std::mutex> lock(error_mutex_);
    if (!error_) error_ = std::current_exception();
  }
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    // spin first: back-to-back loops of a decode step arrive within microseconds
    for (int i = 0; i < kSpinIterations && published_.load(std::memory_order_acquire) == seen; ++i) {
      std::this_thread::yield();
    }
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return generation_ != seen; });
      seen = generation_;
      if (stop_) return;
    }
    run_chunk(index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mutex_);
      done_cv_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn, int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t blocks = (n + grain - 1) / grain;
  const int threads = static_cast<int>(std::min<int64_t>(n_threads_, blocks));
  if (threads <= 1) {
    fn(0, n, 0);
    return;
  }
  fn_ = &fn;
  n_ = n;
  chunk_ = (blocks + n_threads_ - 1) / n_threads_ * grain;
  error_ = nullptr;
  pending_.store(n_threads_ - 1, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++generation_;
    published_.store(generation_, std::memory_order_release);
  }
  wake_.notify_all();
  run_chunk(0);
  if (pending_.load(std::memory_order_acquire) != 0) {
    for (int i = 0; i < kSpinIterations && pending_.load(std::memory_order_acquire) != 0; ++i) std::this_thread::yield();
    std::unique_lock<std::mutex> lock(mutex_);
    done_cv_.wait(lock, [&] { return pending_.load(std::memory_order_acquire) == 0; });
  }
  fn_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

void parallel_for(ThreadPool* pool, int64_t n, const std::function<void(int64_t, int64_t, int)>& fn, int64_t grain) {
  if (n <= 0) return;
  if (pool != nullptr) {
    pool->parallel_for(n, fn, grain);
  } else {
    fn(0, n, 0);
  }
}

}  // namespace ga
