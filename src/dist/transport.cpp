#include "dist/transport.h"

#include <algorithm>
#include <vector>

namespace ga::dist {

// Ring all-reduce: the data in world_size chunks; world_size - 1 steps of reduce-scatter (each rank sends one
// chunk to the next and adds the one it receives from the previous), then world_size - 1 steps of all-gather.
// Every rank adds in the same ring order, so all ranks end with identical bytes.
Ticket Transport::send_recv(const void* send_data, size_t send_bytes, int to, void* recv_data, size_t recv_bytes,
                            int from) {
  const Ticket s = send(send_data, send_bytes, to);
  const Ticket r = recv(recv_data, recv_bytes, from);
  return Ticket{s.id, r.id};
}

namespace {

// The all-gather half of the ring: rank r starts holding chunk (r + first) % w of data (chunk c is
// [chunk_begin(c), chunk_begin(c + 1))); at each of the w - 1 steps it passes the chunk it got last to the next
// rank and takes the previous rank's, so every rank ends holding every chunk.
template <class ChunkBegin>
void ring_gather(Transport& t, float* data, int first, const ChunkBegin& chunk_begin) {
  const int w = t.world_size(), r = t.rank();
  const int next = (r + 1) % w, prev = (r + w - 1) % w;
  const auto chunk_bytes = [&](int c) { return (chunk_begin(c + 1) - chunk_begin(c)) * sizeof(float); };
  for (int step = 0; step < w - 1; ++step) {
    const int send_c = (r + first - step + w) % w, recv_c = (r + first - step - 1 + w) % w;
    t.wait(t.send_recv(data + chunk_begin(send_c), chunk_bytes(send_c), next, data + chunk_begin(recv_c),
                       chunk_bytes(recv_c), prev));
  }
}

}  // namespace

void Transport::all_reduce_sum(float* data, size_t n) {
  const int w = world_size(), r = rank();
  if (w == 1 || n == 0) return;
  const auto chunk_begin = [&](int c) { return n * static_cast<size_t>(c) / static_cast<size_t>(w); };
  const auto chunk_size = [&](int c) { return chunk_begin(c + 1) - chunk_begin(c); };
  const int next = (r + 1) % w, prev = (r + w - 1) % w;
  std::vector<float> incoming(n / static_cast<size_t>(w) + 1);  // the largest chunk
  for (int step = 0; step < w - 1; ++step) {
    const int send_c = (r - step + w) % w, recv_c = (r - step - 1 + w) % w;
    wait(send_recv(data + chunk_begin(send_c), chunk_size(send_c) * sizeof(float), next, incoming.data(),
                   chunk_size(recv_c) * sizeof(float), prev));
    float* dst = data + chunk_begin(recv_c);
    for (size_t i = 0; i < chunk_size(recv_c); ++i) dst[i] += incoming[i];
  }
  ring_gather(*this, data, 1, chunk_begin);  // after the reduce-scatter rank r holds the sum of chunk r + 1
}

void Transport::all_gather(const float* mine, size_t n, float* all) {
  std::copy_n(mine, n, all + static_cast<size_t>(rank()) * n);
  ring_gather(*this, all, 0, [n](int c) { return static_cast<size_t>(c) * n; });
}

void Transport::barrier() {
  float token = 0.0f;
  all_reduce_sum(&token, 1);
}

}  // namespace ga::dist
