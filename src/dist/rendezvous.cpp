#include "dist/rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "gpu_accel/error.h"

namespace ga::dist {
namespace {

constexpr uint32_t kHelloMagic = 0x47415244;  // "GARD"
constexpr uint32_t kMaxBytes = 1u << 20;

using Clock = std::chrono::steady_clock;

struct Socket {  // closes on scope exit
  int fd = -1;
  explicit Socket(int f = -1) : fd(f) {}
  Socket(Socket&& o) noexcept : fd(o.fd) { o.fd = -1; }
  Socket& operator=(Socket&& o) noexcept {
    std::swap(fd, o.fd);
    return *this;
  }
  Socket(const Socket&) = delete;
  ~Socket() {
    if (fd >= 0) ::close(fd);
  }
};

int ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

// Whole-buffer I/O with a deadline; false on timeout, a closed peer or an error.
bool io_all(int fd, unsigned char* p, size_t n, bool reading, Clock::time_point deadline) {
  while (n > 0) {
    pollfd pfd{fd, static_cast<short>(reading ? POLLIN : POLLOUT), 0};
    const int ready = ::poll(&pfd, 1, ms_left(deadline));
    if (ready <= 0) return false;
    const ssize_t k = reading ? ::recv(fd, p, n, 0) : ::send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}
bool read_all(int fd, void* data, size_t n, Clock::time_point deadline) {
  return io_all(fd, static_cast<unsigned char*>(data), n, true, deadline);
}
bool write_all(int fd, const void* data, size_t n, Clock::time_point deadline) {
  // send() only reads the buffer
  return io_all(fd, static_cast<unsigned char*>(const_cast<void*>(data)), n, false, deadline);
}

sockaddr_in resolve(const LaunchEnv& env) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(env.master_addr.c_str(), nullptr, &hints, &res);
  GA_CHECK(rc == 0 && res != nullptr, InvalidArgument, "MASTER_ADDR=", env.master_addr, ": ", ::gai_strerror(rc));
  sockaddr_in addr = *reinterpret_cast<const sockaddr_in*>(res->ai_addr);
  ::freeaddrinfo(res);
  addr.sin_port = htons(static_cast<uint16_t>(env.master_port));
  return addr;
}

struct Hello {
  uint32_t magic, rank, world_size;
};

std::vector<uint8_t> serve(const LaunchEnv& env, std::span<const uint8_t> bytes, Clock::time_point deadline) {
  GA_CHECK(bytes.size() <= kMaxBytes, InvalidArgument, "rendezvous: ", bytes.size(), " bytes to hand out");
  Socket listener(::socket(AF_INET, SOCK_STREAM, 0));
  GA_CHECK(listener.fd >= 0, Io, "rendezvous: socket: ", std::strerror(errno));
  const int one = 1;
  ::setsockopt(listener.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(env.master_port));
  GA_CHECK(::bind(listener.fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0, Io, "rendezvous: rank 0 cannot ",
           "listen on port ", env.master_port, ": ", std::strerror(errno));
  GA_CHECK(::listen(listener.fd, env.world_size) == 0, Io, "rendezvous: listen: ", std::strerror(errno));
  std::vector<Socket> peers(static_cast<size_t>(env.world_size));
  int joined = 1;
  while (joined < env.world_size) {
    pollfd pfd{listener.fd, POLLIN, 0};
    if (::poll(&pfd, 1, ms_left(deadline)) <= 0) {
      std::string missing;
      for (int r = 1; r < env.world_size; ++r) {
        if (peers[static_cast<size_t>(r)].fd < 0) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
      GA_THROW(Unavailable, "rendezvous on port ", env.master_port, ": rank(s) ", missing, " of ", env.world_size,
               " did not join in time");
    }
    Socket peer(::accept(listener.fd, nullptr, nullptr));
    if (peer.fd < 0) continue;
    Hello h{};
    if (!read_all(peer.fd, &h, sizeof h, deadline) || h.magic != kHelloMagic) continue;  // not one of ours
    GA_CHECK(h.world_size == static_cast<uint32_t>(env.world_size), InvalidArgument, "rendezvous: rank ", h.rank,
             " was started with WORLD_SIZE=", h.world_size, ", rank 0 with ", env.world_size);
    GA_CHECK(h.rank >= 1 && h.rank < h.world_size, InvalidArgument, "rendezvous: a peer says it is rank ", h.rank,
             " of ", h.world_size);
    GA_CHECK(peers[h.rank].fd < 0, InvalidArgument, "rendezvous: two processes say they are rank ", h.rank);
    peers[h.rank] = std::move(peer);
    ++joined;
  }
  const uint32_t n = static_cast<uint32_t>(bytes.size());
  for (int r = 1; r < env.world_size; ++r) {
    const int fd = peers[static_cast<size_t>(r)].fd;
    GA_CHECK(write_all(fd, &n, sizeof n, deadline) && write_all(fd, bytes.data(), n, deadline),
             Unavailable, "rendezvous: rank ", r, " left before it received the id");
  }
  return {bytes.begin(), bytes.end()};
}

std::vector<uint8_t> join(const LaunchEnv& env, Clock::time_point deadline) {
  const sockaddr_in addr = resolve(env);
  Socket s;
  // rank 0 may not listen yet: retry until the deadline
  while (true) {
    s = Socket(::socket(AF_INET, SOCK_STREAM, 0));
    GA_CHECK(s.fd >= 0, Io, "rendezvous: socket: ", std::strerror(errno));
    if (::connect(s.fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) break;
    GA_CHECK(ms_left(deadline) > 0, Unavailable, "rendezvous: rank ", env.rank, " could not reach rank 0 at ",
             env.master_addr, ":", env.master_port, " in time (", std::strerror(errno), ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const Hello h{kHelloMagic, static_cast<uint32_t>(env.rank), static_cast<uint32_t>(env.world_size)};
  uint32_t n = 0;
  GA_CHECK(write_all(s.fd, &h, sizeof h, deadline) && read_all(s.fd, &n, sizeof n, deadline),
           Unavailable, "rendezvous: rank ", env.rank, ": rank 0 at ", env.master_addr, ":", env.master_port,
           " did not hand out the id in time (another rank missing, or rank 0 refused this one)");
  GA_CHECK(n <= kMaxBytes, InvalidFormat, "rendezvous: rank 0 announced ", n, " bytes");
  std::vector<uint8_t> out(n);
  GA_CHECK(read_all(s.fd, out.data(), n, deadline), Unavailable, "rendezvous: rank ", env.rank,
           ": rank 0 closed the connection mid-id");
  return out;
}

std::optional<int> env_int(const char* name, bool required_if_any, bool any_set) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') {
    GA_CHECK(!(required_if_any && any_set), InvalidArgument, name, " is not set (RANK and WORLD_SIZE go together)");
    return std::nullopt;
  }
  int out = 0;
  const char* end = v + std::strlen(v);
  const auto [p, ec] = std::from_chars(v, end, out);
  GA_CHECK(ec == std::errc() && p == end && out >= 0, InvalidArgument, name, "=", v, ": not a non-negative integer");
  return out;
}

}  // namespace

std::optional<LaunchEnv> launch_env_from_environment() {
  const bool torch = std::getenv("RANK") != nullptr || std::getenv("WORLD_SIZE") != nullptr;
  const bool mpi = !torch && std::getenv("OMPI_COMM_WORLD_RANK") != nullptr;
  if (!torch && !mpi) return std::nullopt;
  LaunchEnv e;
  e.rank = *env_int(torch ? "RANK" : "OMPI_COMM_WORLD_RANK", true, true);
  e.world_size = *env_int(torch ? "WORLD_SIZE" : "OMPI_COMM_WORLD_SIZE", true, true);
  e.local_rank = env_int(torch ? "LOCAL_RANK" : "OMPI_COMM_WORLD_LOCAL_RANK", false, true).value_or(0);
  if (const char* a = std::getenv("MASTER_ADDR"); a != nullptr && *a != '\0') e.master_addr = a;
  if (const auto port = env_int("MASTER_PORT", false, true)) e.master_port = *port;
  GA_CHECK(e.world_size >= 1 && e.rank < e.world_size, InvalidArgument, "RANK=", e.rank, " is not below WORLD_SIZE=",
           e.world_size);
  GA_CHECK(e.master_port >= 1 && e.master_port <= 65535, InvalidArgument, "MASTER_PORT=", e.master_port,
           ": not a TCP port");
  return e;
}

std::vector<uint8_t> rendezvous_broadcast(const LaunchEnv& env, std::span<const uint8_t> bytes,
                                          std::chrono::milliseconds timeout) {
  GA_CHECK(env.world_size >= 1 && env.rank >= 0 && env.rank < env.world_size, InvalidArgument, "rendezvous: rank ",
           env.rank, " of ", env.world_size);
  if (env.world_size == 1) return {bytes.begin(), bytes.end()};
  const Clock::time_point deadline = Clock::now() + timeout;
  return env.rank == 0 ? serve(env, bytes, deadline) : join(env, deadline);
}

}  // namespace ga::dist
