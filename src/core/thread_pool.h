// A fixed pool of worker threads for data-parallel loops on the CPU backend.
//
// parallel_for splits [0, n) into one contiguous chunk per thread (the caller runs chunk 0), so
// each thread touches one range of rows: no work stealing, no per-item overhead. Workers spin
// briefly before sleeping, because a decode step issues many short loops back to back.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ga {

class ThreadPool {
 public:
  // n_threads <= 0: std::thread::hardware_concurrency().
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // fn(begin, end, thread_index) for each non-empty chunk; chunks are multiples of `grain`
  // (except the last) so callers can keep blocks of rows together. Blocks until all are done.
  // An exception thrown by fn is rethrown here (the first one).
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn, int64_t grain = 1);

 private:
  void worker_loop(int index);
  void run_chunk(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_cv_;
  uint64_t generation_ = 0;
  std::atomic<uint64_t> published_{0};
  std::atomic<int> pending_{0};
  bool stop_ = false;

  // the current job
  const std::function<void(int64_t, int64_t, int)>* fn_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_ = 0;
  std::exception_ptr error_;
  std::mutex error_mutex_;
};

// pool->parallel_for(n, fn, grain) when there is a pool, else fn(0, n, 0) on the calling thread (nothing for n <= 0):
// the CPU kernels take an optional pool.
void parallel_for(ThreadPool* pool, int64_t n, const std::function<void(int64_t, int64_t, int)>& fn,
                  int64_t grain = 1);

}  // namespace ga
