// See connection_probe.h.
#include "server/connection_probe.h"

#include <sys/socket.h>

#include <cerrno>

namespace ga::server {

bool ConnectionProbe::peer_closed() const {
  if (fd_ < 0) return false;
  char byte = 0;
  const ssize_t n = recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return true;  // the client's FIN: nothing more will come, and nobody reads the answer
  if (n > 0) return false;  // a pipelined request waits: the client is there
  return errno == ECONNRESET || errno == ENOTCONN || errno == EPIPE;  // EAGAIN: connected, nothing to read
}

}  // namespace ga::server
