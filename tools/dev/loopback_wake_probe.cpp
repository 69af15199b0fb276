// Loopback TCP request/response round trips after an idle pause (session 15, issue 5): what one tiny HTTP-like
// exchange costs on this machine when the thread at either end sleeps in the kernel (blocking recv) or spins
// (non-blocking recv in a loop), after `gap_ms` of idle (a lone request) and back to back. The difference between the
// idle-blocking and the spinning round trip is the cost of waking sleeping threads (on a VM: halted vCPUs), which a
// server's time to first token pays on the way in and out and an in-process `gpu-accel run` does not.
// Build: g++ -O2 -std=c++20 -pthread loopback_wake_probe.cpp -o loopback_wake_probe; run: ./loopback_wake_probe [reps]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// One byte from fd: blocking recv, or spinning on a non-blocking one.
bool recv_byte(int fd, bool spin) {
  char c;
  for (;;) {
    const ssize_t n = recv(fd, &c, 1, spin ? MSG_DONTWAIT : 0);
    if (n == 1) return true;
    if (n == 0) return false;
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median round trip (us) of `reps` exchanges, each after gap_ms of idle (0: back to back).
double round_trips(int client, bool client_spin, int gap_ms, int reps) {
  std::vector<double> us;
  for (int i = 0; i < reps; ++i) {
    if (gap_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(gap_ms));
    const auto t0 = Clock::now();
    const char c = 'x';
    if (send(client, &c, 1, 0) != 1 || !recv_byte(client, client_spin)) return -1.0;
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  return median(us);
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 41;
  std::printf("| server thread | client thread | gap | median round trip (us) |\n|---|---|---:|---:|\n");
  for (const bool server_spin : {false, true}) {
    const int lfd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof(addr);
    if (bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(lfd, 1) != 0 ||
        getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      std::perror("listen");
      return 1;
    }
    std::thread server([&] {
      const int fd = accept(lfd, nullptr, nullptr);
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      while (recv_byte(fd, server_spin)) {
        const char c = 'y';
        if (send(fd, &c, 1, 0) != 1) break;
      }
      close(fd);
    });
    const int client = socket(AF_INET, SOCK_STREAM, 0);
    const int one = 1;
    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      std::perror("connect");
      return 1;
    }
    for (const bool client_spin : {false, true}) {
      for (const int gap : {0, 20}) {
        const double rt = round_trips(client, client_spin, gap, reps);
        std::printf("| %s | %s | %d ms | %.1f |\n", server_spin ? "spins" : "blocks", client_spin ? "spins" : "blocks",
                    gap, rt);
      }
    }
    close(client);
    server.join();
    close(lfd);
  }
  return 0;
}
