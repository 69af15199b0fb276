// The server's CPU work on a lone completion's way in and out, without sockets or a model (part of a lone
// request's time to first token: the HTTP thread's work between "request readable" and submit, and between
// "first token posted" and the write).
//
// Times, per call (median and minimum over rounds of many calls, ns): parse_request of the body
// bench/serve/bench_http.py sends for a lone request (128 random ids, max_tokens, temperature, stream, ignore_eos); the
// same with 512 ids; the body's Content-Type checks as guarded_post makes them; and
// a first token's SSE event (DeltaEventTemplate::event). Each measures our code only: httplib's own parsing and
// the system calls are outside it (see docs/performance.md for the whole path, `serve --trace-timing`).
//
// Build: ninja -C BUILD bench_request_path (in the default build when the server is); run: BUILD/bin/bench_request_path.
// The numbers move with the machine's load: compare medians of runs made back to back.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <httplib.h>

#include "server/completion_route.h"
#include "server/request_parse.h"
#include "server/responses.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace ga::server;

// The body ttft_probe.py sends: json.dumps of {"prompt": [ids], "max_tokens": 2, "temperature": 0,
// "stream": true, "ignore_eos": true} (Python's separators: ", " and ": ").
std::string probe_body(int n_ids, int n_vocab) {
  std::mt19937 rng(static_cast<unsigned>(n_ids));
  std::uniform_int_distribution<int> id(3, n_vocab - 1);
  std::string body = "{\"prompt\": [";
  for (int i = 0; i < n_ids; ++i) body += (i ? ", " : "") + std::to_string(id(rng));
  return body + "], \"max_tokens\": 2, \"temperature\": 0, \"stream\": true, \"ignore_eos\": true}";
}

// Median and minimum ns per call of fn over `rounds` rounds of `calls` calls.
template <typename Fn>
void time_it(const char* name, int rounds, int calls, Fn&& fn) {
  std::vector<double> per_call;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < calls; ++i) fn();
    per_call.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / calls);
  }
  std::sort(per_call.begin(), per_call.end());
  std::printf("%-44s median %9.1f ns   min %9.1f ns\n", name, per_call[per_call.size() / 2], per_call.front());
}

// Median and minimum ns of single calls of fn made with cold caches: before each, a walk over a buffer larger
// than the last-level cache evicts the code and data that fn uses, as the server's HTTP thread finds them after
// a millisecond or more of other work (a hot loop hides most of what a lone request pays: in the server,
// parse_request took 13 us on the H200 host, a hot loop of it ~1.4 us on the dev machine).
template <typename Fn>
void time_cold(const char* name, int calls, Fn&& fn) {
  static std::vector<char> scrub(size_t{64} << 20);
  std::vector<double> ns;
  for (int i = 0; i < calls; ++i) {
    for (size_t j = 0; j < scrub.size(); j += 64) scrub[j] = static_cast<char>(scrub[j] + 1);
    const auto t0 = Clock::now();
    fn();
    ns.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count());
  }
  std::sort(ns.begin(), ns.end());
  std::printf("%-44s median %9.1f ns   min %9.1f ns   (cold)\n", name, ns[ns.size() / 2], ns.front());
}

// Keeps a result alive so that the compiler cannot drop the call.
template <typename T>
void keep(const T& value) {
  asm volatile("" : : "g"(&value) : "memory");
}

}  // namespace

int main() {
  const int rounds = 31, calls = 2000, cold_calls = 201;
  const std::string body128 = probe_body(128, 512), body512 = probe_body(512, 512);
  time_it("parse_request, 128 ids", rounds, calls, [&] { keep(parse_request(Endpoint::Completions, body128)); });
  time_it("parse_request, 512 ids", rounds, calls / 4, [&] { keep(parse_request(Endpoint::Completions, body512)); });
  time_cold("parse_request, 128 ids", cold_calls, [&] { keep(parse_request(Endpoint::Completions, body128)); });
  time_cold("parse_request, 512 ids", cold_calls, [&] { keep(parse_request(Endpoint::Completions, body512)); });

  httplib::Request req;
  req.method = "POST";
  for (const auto& [k, v] : {std::pair{"Host", "127.0.0.1"}, {"Content-Type", "application/json"},
                             {"Content-Length", "700"}, {"REMOTE_ADDR", "127.0.0.1"}, {"REMOTE_PORT", "54578"},
                             {"LOCAL_ADDR", "127.0.0.1"}, {"LOCAL_PORT", "18124"}}) {
    req.headers.emplace(k, v);
  }
  const auto content_type_checks = [&] {  // as guarded_post makes them (api_server.cpp)
    const std::string content_type = req.get_header_value("Content-Type");
    keep(is_multipart_form_data(content_type));
    check_content_type(content_type);
  };
  time_it("Content-Type checks (guarded_post's)", rounds, calls, content_type_checks);
  time_cold("Content-Type checks (guarded_post's)", cold_calls, content_type_checks);

  ResponseHeader header;
  header.endpoint = Endpoint::Completions;
  header.id = new_completion_id(Endpoint::Completions);
  header.created = 1764000000;
  header.model = "stories260K";
  const DeltaEventTemplate deltas(header);
  const std::string text = " Once";
  time_it("first token's SSE event", rounds, calls, [&] { keep(deltas.event(text)); });
  time_cold("first token's SSE event", cold_calls, [&] { keep(deltas.event(text)); });
  return 0;
}
