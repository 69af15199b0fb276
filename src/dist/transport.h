// The transport under the multi-rank algorithms (ring attention, tensor and context parallelism).
//
// A group of `world_size` ranks exchanges bytes point to point and reduces floats. The algorithms are
// written once against this interface; the implementations are the in-process loopback (loopback.h: N ranks
// as threads of one process, host memory: how CI tests the algorithms without GPUs) and, on GPUs, NCCL.
// Both must give the same bytes. Sends and receives are posted, then waited on, so an algorithm can compute
// while its messages travel (ring attention's double buffering).
//
// Failure: a peer that died or stopped answering makes wait() throw ga::Error (kind Unavailable) naming that
// rank, within the group's timeout; no rank hangs. Messages between two ranks arrive in the order they were
// posted; a receive must name the exact size of the message it matches (a mismatch is an Internal error).
#pragma once

#include <cstddef>
#include <cstdint>

namespace ga::dist {

// A posted send or receive (an index into the transport's table of pending operations).
struct Ticket {
  int64_t id = -1;
  int64_t second = -1;  // send_recv's default: the receive's own ticket
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // The buffer must stay valid (and, for a send, unchanged) until wait() on the ticket returns.
  virtual Ticket send(const void* data, size_t bytes, int to) = 0;
  virtual Ticket recv(void* data, size_t bytes, int from) = 0;
  virtual void wait(Ticket ticket) = 0;
  // A send to `to` and a receive from `from` posted together, one ticket for both: how the ring algorithms
  // exchange. On GPUs (NCCL) a lone send waits on the device for its receive, so two ranks that each send
  // first and receive second would wait on each other; posted as one group they cannot.
  virtual Ticket send_recv(const void* send_data, size_t send_bytes, int to, void* recv_data, size_t recv_bytes,
                           int from);
  // data[i] = the sum over ranks of data[i], on every rank (a ring reduce-scatter then all-gather over
  // send/recv unless the implementation has its own). Every rank passes the same n.
  virtual void all_reduce_sum(float* data, size_t n);
  // all[q * n .. (q + 1) * n) = rank q's `mine`, on every rank (a ring over send/recv unless the implementation
  // has its own). Every rank passes the same n; `mine` may not overlap `all`.
  virtual void all_gather(const float* mine, size_t n, float* all);
  virtual void barrier();
};

}  // namespace ga::dist
