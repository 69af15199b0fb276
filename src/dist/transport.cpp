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
  for (int step = 0; step < w - 1; ++step) {
    const int send_c = (r + 1 - step + w) % w, recv_c = (r - step + w) % w;
    wait(send_recv(data + chunk_begin(send_c), chunk_size(send_c) * sizeof(float), next, data + chunk_begin(recv_c),
                   chunk_size(recv_c) * sizeof(float), prev));
  }
}

void Transport::all_gather(const float* mine, size_t n, float* all) {
  const int w = world_size(), r = rank();
  std::copy_n(mine, n, all + static_cast<size_t>(r) * n);
  const int next = (r + 1) % w, prev = (r + w - 1) % w;
  // step s: pass on the block that arrived at the step before (rank r - s's), take rank r - s - 1's
  for (int step = 0; step < w - 1; ++step) {
    const int send_c = (r - step + w) % w, recv_c = (r - step - 1 + w) % w;
    wait(send_recv(all + static_cast<size_t>(send_c) * n, n * sizeof(float), next, all + static_cast<size_t>(recv_c) * n,
                   n * sizeof(float), prev));
  }
}

void Transport::barrier() {
  float token = 0.0f;
  all_reduce_sum(&token, 1);
}

}  // namespace ga::dist
