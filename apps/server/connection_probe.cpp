// See connection_probe.h.
#include "server/connection_probe.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>

namespace ga::server {
namespace {

// The numeric address and port of a socket address, or false for another family.
bool address_of(const sockaddr_storage& a, std::string* addr, int* port) {
  char text[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(a);
    if (inet_ntop(AF_INET, &v4.sin_addr, text, sizeof(text)) == nullptr) return false;
    *port = ntohs(v4.sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(a);
    if (inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof(text)) == nullptr) return false;
    *port = ntohs(v6.sin6_port);
  } else {
    return false;
  }
  *addr = text;
  return true;
}

bool matches(int fd, const std::string& remote_addr, int remote_port, const std::string& local_addr,
             int local_port) {
  sockaddr_storage local{}, peer{};
  socklen_t local_len = sizeof(local), peer_len = sizeof(peer);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0) return false;  // not a socket
  std::string addr;
  int port = -1;
  if (!address_of(local, &addr, &port) || port != local_port || addr != local_addr) return false;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) return false;
  return address_of(peer, &addr, &port) && port == remote_port && addr == remote_addr;
}

}  // namespace

ConnectionProbe::ConnectionProbe(const std::string& remote_addr, int remote_port, const std::string& local_addr,
                                 int local_port) {
  if (remote_port < 0 || local_port < 0) return;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return;
  while (const dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    if (matches(static_cast<int>(fd), remote_addr, remote_port, local_addr, local_port)) {
      fd_ = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
}

bool ConnectionProbe::peer_closed() const {
  if (fd_ < 0) return false;
  char byte = 0;
  const ssize_t n = recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return true;  // the client's FIN: nothing more will come, and nobody reads the answer
  if (n > 0) return false;  // a pipelined request waits: the client is there
  return errno == ECONNRESET || errno == ENOTCONN || errno == EPIPE;  // EAGAIN: connected, nothing to read
}

}  // namespace ga::server
