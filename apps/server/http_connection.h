// How the server serves one connection: the wait for its next request, and the socket under httplib's parser.
//
// Why not httplib's own loop: Debian's cpp-httplib 0.11 (a compiled library, so no macro changes it) waits for
// a keep-alive connection's next request in a loop of select(10 ms) then sleep(1 ms); a request that lands in
// the sleep waits up to a millisecond, and every request costs the kernel's wake-up of the sleeping worker
// (30-60 us on a virtual machine: a lone request's way in, against a time-to-first-token budget of ~0.15 ms). httplib lets a subclass
// replace exactly that part: process_and_close_socket is a virtual of httplib::Server (its TLS server
// overrides it the same way) and process_request, which parses and routes one request, is protected.
// ConnectionServer overrides it with:
//   - a wait that polls the socket for its whole duration (no sleep between polls), in slices so that a
//     stopping server is noticed, ending at the keep-alive timeout as before;
//   - optionally a short busy-wait first (ConnectionWaitOptions::spin_us): right after a connection is
//     accepted or a response ends, the next request usually follows within microseconds to a millisecond
//     (a client that connected to send, a client streaming its next turn), so the worker watches the socket
//     instead of sleeping and reads the request without a wake-up. Bounded in time and in threads
//     (max_spinners), so an idle server uses no CPU and 64 finishing streams do not take 64 cores;
//   - a SocketStream of its own: reads go straight to recv (a poll only when no data is there yet; httplib's
//     stream polls before every read and every write), the peer's and our own address are looked up once
//     per connection instead of once per request.
// The HTTP semantics stay httplib's: at most keep_alive_max_count requests per connection, the same read and
// write timeouts, the same parser and routing.
//
// LifoThreadPool (the server's task queue: one job per accepted connection) hands a new connection to the worker
// that went idle last instead of httplib's pool's condition variable, which wakes the worker that has waited
// longest: the coldest one, whose caches, TLB and malloc arena were left by other work long ago. A lone request
// arriving on a fresh connection then runs httplib's parser, the JSON parser and our checks on a warm thread
// (on the H200's host a 128-id body's nlohmann parse took 55-70 us on the HTTP thread; 13 us hot on the dev machine).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include <httplib.h>

namespace ga::server {

struct ConnectionWaitOptions {
  // Busy-wait up to this long for a connection's next request (after the accept, after each response);
  // 0: never busy-wait (poll only).
  int spin_us = 0;
  int max_spinners = 2;  // connections busy-waiting at once; the others poll
};

// When this worker thread last found its connection readable (the wait for a request ended); the epoch when
// it has not waited yet. For ServerOptions::trace_timing.
std::chrono::steady_clock::time_point connection_readable_time();

// The socket of the connection this worker thread is serving (so inside a request's handler: httplib's Request
// carries only the addresses), or -1 outside one. ConnectionProbe watches the client through it.
int current_connection_socket();

// A fixed set of worker threads; a job goes to the most recently idle one (a stack), or waits in a FIFO queue
// while every worker is busy.
class LifoThreadPool final : public httplib::TaskQueue {
 public:
  explicit LifoThreadPool(size_t n_threads);
  ~LifoThreadPool() override;
  LifoThreadPool(const LifoThreadPool&) = delete;
  LifoThreadPool& operator=(const LifoThreadPool&) = delete;

  void enqueue(std::function<void()> job) override;
  // Runs the queued jobs, then joins the workers (httplib calls it once the listening socket is closed).
  void shutdown() override;

 private:
  struct Worker {
    std::condition_variable wake;
    std::function<void()> job;  // handed over by enqueue() while the worker was idle
  };
  void work();

  std::mutex mutex_;
  std::vector<Worker*> idle_;                // the most recently idle worker last
  std::deque<std::function<void()>> queue_;  // jobs that found no idle worker
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

class ConnectionServer : public httplib::Server {
 public:
  explicit ConnectionServer(ConnectionWaitOptions options) : options_(options) {}

  // Called on the connection's thread with the first bytes of each request as they arrive, before httplib
  // parses anything (the request line, usually the whole head): a hint of what is coming, for work that can
  // start early (ApiServer wakes the scheduler for a completion). May be empty; set before the server runs.
  std::function<void(std::string_view)> on_request_bytes;

 private:
  bool process_and_close_socket(socket_t sock) override;
  // Waits until `sock` is readable (a request, or the peer's close: process_request finds out which); false
  // at the keep-alive timeout or when the server stops.
  bool wait_for_request(socket_t sock);

  ConnectionWaitOptions options_;
  std::atomic<int> spinners_{0};
};

}  // namespace ga::server
