#include "dist/loopback.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <thread>
#include <unordered_map>

#include "gpu_accel/error.h"

namespace ga::dist {

class LoopbackTransport final : public Transport {
 public:
  LoopbackTransport(LoopbackGroup& group, int rank)
      : group_(group), rank_(rank), posted_from_(static_cast<size_t>(group.world_size_), 0) {}
  int rank() const override { return rank_; }
  int world_size() const override { return group_.world_size_; }
  void clear() {
    pending_.clear();
    std::fill(posted_from_.begin(), posted_from_.end(), 0);
  }

  Ticket send(const void* data, size_t bytes, int to) override {
    check_peer(to, "send to");
    const auto* p = static_cast<const unsigned char*>(data);
    {
      std::lock_guard<std::mutex> lock(group_.mu_);
      LoopbackGroup::Channel& ch = group_.channel(rank_, to);
      ch.messages.emplace(ch.sent++, std::vector<unsigned char>(p, p + bytes));
    }
    group_.cv_.notify_all();
    return Ticket{next_id_++};  // complete: the bytes are queued
  }

  Ticket recv(void* data, size_t bytes, int from) override {
    check_peer(from, "receive from");
    const Ticket t{next_id_++};
    pending_[t.id] = Pending{data, bytes, from, posted_from_[static_cast<size_t>(from)]++};
    return t;
  }

  void wait(Ticket ticket) override {
    if (ticket.second >= 0) {  // send_recv: the send is complete, the receive is the second
      wait(Ticket{ticket.second, -1});
      return;
    }
    const auto it = pending_.find(ticket.id);
    if (it == pending_.end()) return;  // a send, or already waited on
    const Pending p = it->second;
    pending_.erase(it);
    std::unique_lock<std::mutex> lock(group_.mu_);
    LoopbackGroup::Channel& ch = group_.channel(p.from, rank_);
    const auto ready = [&] {
      return ch.messages.count(p.seq) > 0 || !group_.failed_[static_cast<size_t>(p.from)].empty();
    };
    if (!group_.cv_.wait_for(lock, group_.timeout_, ready)) {
      GA_THROW(Unavailable, "rank ", rank_, ": no message from rank ", p.from, " within ", group_.timeout_.count(),
               " ms (rank ", p.from, " died or is stuck)");
    }
    const auto msg = ch.messages.find(p.seq);
    if (msg == ch.messages.end()) {
      GA_THROW(Unavailable, "rank ", rank_, ": rank ", p.from, " failed: ", group_.failed_[static_cast<size_t>(p.from)]);
    }
    std::vector<unsigned char> m = std::move(msg->second);
    ch.messages.erase(msg);
    GA_CHECK(m.size() == p.bytes, Internal, "rank ", rank_, ": a receive of ", p.bytes, " bytes from rank ", p.from,
             " met a message of ", m.size(), " bytes");
    if (p.bytes > 0) std::memcpy(p.data, m.data(), p.bytes);
  }

 private:
  struct Pending {
    void* data;
    size_t bytes;
    int from;
    uint64_t seq;  // its number among this rank's receives from `from`
  };
  void check_peer(int peer, const char* what) const {
    GA_CHECK(peer >= 0 && peer < group_.world_size_ && peer != rank_, InvalidArgument, "rank ", rank_, ": ", what,
             " rank ", peer, " (world size ", group_.world_size_, ")");
  }
  LoopbackGroup& group_;
  int rank_;
  int64_t next_id_ = 0;
  std::unordered_map<int64_t, Pending> pending_;
  std::vector<uint64_t> posted_from_;  // receives posted so far, per peer
};

LoopbackGroup::LoopbackGroup(int world_size, std::chrono::milliseconds timeout)
    : world_size_(world_size), timeout_(timeout) {
  GA_CHECK(world_size >= 1, InvalidArgument, "a loopback group needs at least one rank, not ", world_size);
  channels_.resize(static_cast<size_t>(world_size) * static_cast<size_t>(world_size));
  failed_.resize(static_cast<size_t>(world_size));
  for (int r = 0; r < world_size; ++r) transports_.push_back(std::make_unique<LoopbackTransport>(*this, r));
}

LoopbackGroup::~LoopbackGroup() = default;

Transport& LoopbackGroup::transport(int rank) {
  GA_CHECK(rank >= 0 && rank < world_size_, InvalidArgument, "rank ", rank, " of a group of ", world_size_);
  return *transports_[static_cast<size_t>(rank)];
}

void LoopbackGroup::fail(int rank, const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    failed_[static_cast<size_t>(rank)] = why.empty() ? "failed" : why;
  }
  cv_.notify_all();
}

void LoopbackGroup::run(const std::function<void(Transport&)>& fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (Channel& c : channels_) c = Channel{};
    for (std::string& f : failed_) f.clear();
  }
  for (auto& t : transports_) static_cast<LoopbackTransport&>(*t).clear();
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world_size_));
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size_; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(transport(r));
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = std::current_exception();
        fail(r, e.what());
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
        fail(r, "unknown exception");
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace ga::dist
