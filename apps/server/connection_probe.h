// Whether the client of a request is still connected, for the answers that write nothing until they
// are complete (non-streaming completions). A stream notices a departed client on its next write; a
// whole answer writes only at the end, so without a check a client that hangs up keeps its request
// generating (and its KV blocks) to the last token.
//
// Why it is built this way: cpp-httplib 0.11 (Debian's) gives handlers neither the socket nor a
// connection check, only the connection's two addresses. The socket is found once among the process's
// descriptors (/proc/self/fd) as the TCP socket with exactly that local and remote address, then
// peeked without blocking while the answer is computed: recv(MSG_PEEK) returning 0 is the client's
// FIN, an error is a reset. The descriptor stays valid while the handler runs (httplib closes it after
// the handler returns). Limits: Linux only (elsewhere nothing is found and requests run to the end, as
// before); a client that half-closes its side but still waits for the answer would be taken as gone
// (HTTP clients do not do that).
#pragma once

#include <string>

namespace ga::server {

class ConnectionProbe {
 public:
  ConnectionProbe(const std::string& remote_addr, int remote_port, const std::string& local_addr, int local_port);
  bool found() const { return fd_ >= 0; }
  // True once the client has closed or reset the connection (false when not found).
  bool peer_closed() const;

 private:
  int fd_ = -1;
};

}  // namespace ga::server
