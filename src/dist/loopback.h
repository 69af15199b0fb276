// The in-process loopback transport: N ranks of one group as threads of one process, exchanging host
// memory. NCCL refuses two ranks of a communicator on one GPU, so this is how the multi-rank algorithms are
// tested on one machine (and on CI's CPUs); the same algorithm code runs over NCCL on several GPUs.
//
// Sends are eager: send() copies the bytes into the receiver's queue for that sender and completes at once,
// so posting a send never blocks and a ring of sends cannot deadlock. The n-th receive a rank posts from a
// peer matches the n-th message that peer sent it, whatever order the receives are waited on in (as NCCL and
// MPI match in posting order). wait() on a receive blocks until the
// message arrives, the sender is marked failed (fail(): a rank that threw) or the group's timeout passes;
// the last two throw ga::Error (Unavailable) naming the sender.
#pragma once

#include <chrono>
#include <cstdint>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "dist/transport.h"

namespace ga::dist {

class LoopbackGroup {
 public:
  LoopbackGroup(int world_size, std::chrono::milliseconds timeout = std::chrono::seconds(30));
  ~LoopbackGroup();
  LoopbackGroup(const LoopbackGroup&) = delete;
  LoopbackGroup& operator=(const LoopbackGroup&) = delete;

  int world_size() const { return world_size_; }
  // Rank r's transport (owned by the group; use it from one thread).
  Transport& transport(int rank);
  // Marks a rank failed: every wait for a message from it that is not already queued throws at once.
  void fail(int rank, const std::string& why);

  // Runs fn(transport) for every rank on its own thread and joins them. A rank that throws is marked failed
  // (so its peers stop waiting for it); then the first error (in rank order) is rethrown. Each run starts
  // from a clean group (no failed rank, no message or receive left over from an earlier run).
  void run(const std::function<void(Transport&)>& fn);

 private:
  friend class LoopbackTransport;
  struct Channel {  // messages from one rank to another, by their number on the channel
    uint64_t sent = 0;
    std::unordered_map<uint64_t, std::vector<unsigned char>> messages;
  };
  Channel& channel(int from, int to) { return channels_[static_cast<size_t>(from * world_size_ + to)]; }

  int world_size_;
  std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Channel> channels_;       // [from][to]
  std::vector<std::string> failed_;     // per rank: why it failed ("" while alive)
  std::vector<std::unique_ptr<Transport>> transports_;
};

}  // namespace ga::dist
