// See http_connection.h.
#include "server/http_connection.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "core/spin_wait.h"

namespace ga::server {

namespace {

using Clock = std::chrono::steady_clock;

// A waiting connection looks at the server's state this often (stop() then ends it within a slice).
constexpr int kWaitSliceMs = 50;
constexpr size_t kReadBufferBytes = 4096;  // as httplib's own stream: its parser reads the head a byte at a time

thread_local Clock::time_point t_readable{};
thread_local int t_socket = -1;  // current_connection_socket()

int to_ms(time_t sec, time_t usec) { return static_cast<int>(sec * 1000 + usec / 1000); }

// poll() on one socket, restarted after a signal; > 0 when an event is there, 0 on timeout, < 0 on error.
int poll_one(socket_t sock, short events, int timeout_ms, short* revents = nullptr) {
  pollfd p{sock, events, 0};
  int r;
  do {
    r = ::poll(&p, 1, timeout_ms);
  } while (r < 0 && errno == EINTR);
  if (revents != nullptr) *revents = p.revents;
  return r;
}

// "ip" and port of a socket address, numeric (what httplib puts into Request::remote_addr / local_addr).
void numeric_address(const sockaddr_storage& addr, socklen_t len, std::string& ip, int& port) {
  char host[NI_MAXHOST] = {};
  char service[NI_MAXSERV] = {};
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host, sizeof(host), service, sizeof(service),
                    NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
    ip = host;
    port = std::atoi(service);
  }
}

// The socket under httplib's parser for a whole connection (see the header for what differs from httplib's).
class ConnectionStream final : public httplib::Stream {
 public:
  ConnectionStream(socket_t sock, int read_timeout_ms, int write_timeout_ms)
      : sock_(sock), read_timeout_ms_(read_timeout_ms), write_timeout_ms_(write_timeout_ms) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (::getpeername(sock, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      numeric_address(addr, len, remote_ip_, remote_port_);
    }
    len = sizeof(addr);
    if (::getsockname(sock, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      numeric_address(addr, len, local_ip_, local_port_);
    }
  }

  bool has_buffered_bytes() const { return offset_ < filled_; }

  // The bytes of the next request that have arrived (reading what is there without waiting, when nothing is
  // buffered yet); httplib's parser reads them from the buffer afterwards, so no byte is read twice.
  std::string_view arrived_bytes() {
    if (!has_buffered_bytes()) {
      const ssize_t n = receive_now(buffer_, kReadBufferBytes);
      offset_ = 0;
      filled_ = n > 0 ? static_cast<size_t>(n) : 0;
    }
    return std::string_view(buffer_ + offset_, filled_ - offset_);
  }

  bool is_readable() const override {
    return has_buffered_bytes() || poll_one(sock_, POLLIN, read_timeout_ms_) > 0;
  }

  // Room to write within the write timeout, and the peer still there (httplib's check: a readable socket
  // whose peek finds no byte was closed by the peer). One poll for both in the usual case.
  bool is_writable() const override {
    short revents = 0;
    if (poll_one(sock_, POLLOUT | POLLIN, write_timeout_ms_, &revents) <= 0) return false;
    if ((revents & (POLLERR | POLLNVAL)) != 0) return false;
    if ((revents & (POLLIN | POLLHUP)) != 0) {
      char byte;
      const ssize_t n = ::recv(sock_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return false;
    }
    if ((revents & POLLOUT) != 0) return true;
    return poll_one(sock_, POLLOUT, write_timeout_ms_, &revents) > 0 && (revents & POLLOUT) != 0;
  }

  ssize_t read(char* ptr, size_t size) override {
    if (size == 1 && has_buffered_bytes()) {  // httplib reads the request line and headers a byte per call
      *ptr = buffer_[offset_++];
      return 1;
    }
    if (has_buffered_bytes()) return take_buffered(ptr, size);
    if (size >= kReadBufferBytes) return receive(ptr, size);
    const ssize_t n = receive(buffer_, kReadBufferBytes);
    if (n <= 0) return n;
    offset_ = 0;
    filled_ = static_cast<size_t>(n);
    return take_buffered(ptr, size);
  }

  // A send that does not block; only when the socket's buffer is full, a wait for room (the write timeout).
  ssize_t write(const char* ptr, size_t size) override {
    while (true) {
      const ssize_t n = ::send(sock_, ptr, size, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n >= 0) return n;
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
      short revents = 0;
      if (poll_one(sock_, POLLOUT, write_timeout_ms_, &revents) <= 0 || (revents & POLLOUT) == 0) return -1;
    }
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = remote_ip_;
    port = remote_port_;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = local_ip_;
    port = local_port_;
  }
  socket_t socket() const override { return sock_; }

 private:
  ssize_t take_buffered(char* ptr, size_t size) {
    const size_t n = std::min(size, filled_ - offset_);
    std::memcpy(ptr, buffer_ + offset_, n);
    offset_ += n;
    return static_cast<ssize_t>(n);
  }

  // What has arrived, without waiting (restarted after a signal); < 0 with errno EAGAIN when nothing has.
  ssize_t receive_now(char* ptr, size_t size) {
    ssize_t n;
    do {
      n = ::recv(sock_, ptr, size, MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    return n;
  }

  // recv without blocking first (a request's bytes are usually there already); a poll only when none are.
  ssize_t receive(char* ptr, size_t size) {
    while (true) {
      const ssize_t n = receive_now(ptr, size);
      if (n >= 0) return n;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
      if (poll_one(sock_, POLLIN, read_timeout_ms_) <= 0) return -1;
    }
  }

  socket_t sock_;
  int read_timeout_ms_;
  int write_timeout_ms_;
  std::string remote_ip_, local_ip_;
  int remote_port_ = -1, local_port_ = -1;
  char buffer_[kReadBufferBytes];
  size_t offset_ = 0, filled_ = 0;
};

}  // namespace

Clock::time_point connection_readable_time() { return t_readable; }
int current_connection_socket() { return t_socket; }

LifoThreadPool::LifoThreadPool(size_t n_threads) {
  threads_.reserve(n_threads);
  for (size_t i = 0; i < n_threads; ++i) threads_.emplace_back([this] { work(); });
}

LifoThreadPool::~LifoThreadPool() {
  if (!threads_.empty()) shutdown();
}

void LifoThreadPool::enqueue(std::function<void()> job) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (idle_.empty() || stopping_) {
    queue_.push_back(std::move(job));
    return;
  }
  Worker* worker = idle_.back();
  idle_.pop_back();
  worker->job = std::move(job);
  lock.unlock();
  worker->wake.notify_one();
}

void LifoThreadPool::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    for (Worker* worker : idle_) worker->wake.notify_one();
  }
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

void LifoThreadPool::work() {
  Worker self;
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    std::function<void()> job;
    if (!queue_.empty()) {
      job = std::move(queue_.front());
      queue_.pop_front();
    } else if (stopping_) {
      return;
    } else {
      idle_.push_back(&self);
      self.wake.wait(lock, [&] { return self.job != nullptr || stopping_; });
      if (self.job == nullptr) {  // stopping: leave the idle stack, then run what is queued and end
        idle_.erase(std::find(idle_.begin(), idle_.end(), &self));
        continue;
      }
      job = std::move(self.job);
      self.job = nullptr;
    }
    lock.unlock();
    job();
    job = nullptr;  // the connection's state goes with it, before this worker counts as idle again
    lock.lock();
  }
}

bool ConnectionServer::wait_for_request(socket_t sock) {
  const Clock::time_point start = Clock::now();
  if (options_.spin_us > 0) {
    int n = spinners_.load(std::memory_order_relaxed);
    bool slot = false;
    while (n < options_.max_spinners && !(slot = spinners_.compare_exchange_weak(n, n + 1))) {
    }
    if (slot) {
      const bool found = spin_until([&] { return poll_one(sock, POLLIN, 0) != 0; },
                                    start + std::chrono::microseconds(options_.spin_us));
      spinners_.fetch_sub(1, std::memory_order_acq_rel);
      if (found) {
        t_readable = Clock::now();
        return true;
      }
    }
  }
  const Clock::time_point end = start + std::chrono::seconds(keep_alive_timeout_sec_);
  while (svr_sock_ != INVALID_SOCKET) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
    if (left <= 0) return false;
    const int r = poll_one(sock, POLLIN, static_cast<int>(std::min<long long>(left, kWaitSliceMs)));
    if (r != 0) {  // readable (a request, or the peer's close) / an error
      t_readable = Clock::now();
      return r > 0;
    }
  }
  return false;
}

bool ConnectionServer::process_and_close_socket(socket_t sock) {
  bool ok = false;
  t_socket = sock;
  {
    ConnectionStream stream(sock, to_ms(read_timeout_sec_, read_timeout_usec_),
                            to_ms(write_timeout_sec_, write_timeout_usec_));
    for (size_t left = keep_alive_max_count_; left > 0 && svr_sock_ != INVALID_SOCKET; --left) {
      // Bytes of a pipelined request may already sit in the stream's buffer: no wait for those.
      t_readable = Clock::time_point{};
      if (!stream.has_buffered_bytes() && !wait_for_request(sock)) break;
      if (on_request_bytes) on_request_bytes(stream.arrived_bytes());
      bool connection_closed = false;
      ok = process_request(stream, left == 1, connection_closed, nullptr);
      if (!ok || connection_closed) break;
    }
  }
  t_socket = -1;
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ok;
}

}  // namespace ga::server
