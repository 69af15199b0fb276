// Whether the client of a request is still connected, for the answers that write nothing until they
// are complete (non-streaming completions). A stream notices a departed client on its next write; a
// whole answer writes only at the end, so without a check a client that hangs up keeps its request
// generating (and its KV blocks) to the last token.
//
// Why it is built this way: cpp-httplib 0.11 (Debian's) gives handlers only the connection's addresses, not
// its socket; the server's own connection loop (http_connection.h) knows it, and current_connection_socket()
// hands it to the handler running on that thread. The socket is peeked without blocking while the answer is
// computed: recv(MSG_PEEK) returning 0 is the client's FIN, an error is a reset. The descriptor stays valid while
// the handler runs (the connection loop closes it after the request). Limit: a client that half-closes its side
// but still waits for the answer would be taken as gone (HTTP clients do not do that).
#pragma once

namespace ga::server {

class ConnectionProbe {
 public:
  // fd: the connection's socket, or -1 (nothing to watch: requests run to the end).
  explicit ConnectionProbe(int fd) : fd_(fd) {}
  // True once the client has closed or reset the connection (false when there is no socket).
  bool peer_closed() const;

 private:
  int fd_ = -1;
};

}  // namespace ga::server
