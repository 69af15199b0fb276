#!/usr/bin/env python3
"""Load generator for `gpu-accel serve`: N concurrent streaming clients of /v1/completions over HTTP.

What it answers: the aggregate generation throughput with N concurrent streaming clients against
one client, and the time to first token (TTFT) a lone client sees, measured the way a real client sees them:
through the socket, the server's HTTP threads, JSON and server-sent events. `gpu-accel bench-serve` measures
the same rounds in process (no HTTP); the difference between the two is the serving path's cost.

Why it is built this way:
- Python standard library only (streams on plain sockets on threads, spread over a few processes): the GPU machine has
  Python and nothing else that can be installed. One process holds the GIL for all of its streams, and 64
  streams at ~1 ms per token are tens of thousands of chunks a second, so a round's clients are split over
  --processes worker processes (spawned once), each streaming its share on threads.
- Each request sends its prompt as a list of token ids (the OpenAI completions API allows that, and the
  server takes ids as given, without adding BOS), so the prompt length is exact: `--prompt-tokens` ids
  drawn at random from the vocabulary, seeded per round and client, so no two requests share a prefix (the
  server's prefix cache would otherwise skip their prefill). Greedy (temperature 0) and `ignore_eos` (the
  server's extension, as in vLLM), so every request generates exactly `--max-tokens` tokens.
- Connections are opened before a round starts and the clients are released together (one event shared
  by the processes; times are CLOCK_MONOTONIC, the same clock in every process): the round measures
  requests, not TCP handshakes. Aggregate tok/s = sum of usage.completion_tokens / (last
  stream's end - release). TTFT = request sent -> first data chunk with a choice (the server sends a comment
  first, to flush the headers; comments are not tokens).
- The client parses JSON only where it must (first chunk, usage chunk, error events): with 64 streams at
  tens of thousands of chunks a second, a client that parses every chunk would measure itself. The
  clients' CPU time per round is reported (100% = one core): near 100% per process means the client, not
  the server, set the pace.
- The lone requests' TTFT is measured twice (--ttft-repeats each): with the reader above (a blocking recv: the
  client thread sleeps until the answer arrives, so its own wake-up, tens of microseconds on a VM, is part of
  the figure, as for any real client) and with a spinning reader (the socket non-blocking, polled in a tight
  loop: the client sees the first token as soon as it is in its socket; for the TTFT of lone requests only, one
  busy client core per request). The request's bytes are built before the send time is taken, and go out in
  one send() (the server wakes once), on a TCP_NODELAY socket.
- Every request is checked: HTTP 200, a stream that ends with [DONE], usage present with
  prompt_tokens == --prompt-tokens and completion_tokens == --max-tokens, no error event. --check makes any
  failure the exit status (the CTest entry uses it).

Usage: bench_http.py --url http://127.0.0.1:8080 --clients 1,16,64 --prompt-tokens 128 --max-tokens 128
       [--api-key KEY] [--json results.json] [--check]
       bench_http.py --server-cmd "gpu-accel serve -m M --port 0 --quiet" ...  (starts the server, reads the
       port from its "listening on" line, stops it with SIGTERM at the end)
"""

import argparse
import http.client
import json
import multiprocessing
import os
import random
import re
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse


class Result:
    """One request's outcome, as the client saw it."""

    def __init__(self):
        self.ttft = None  # s from sending the request to the first chunk with a choice
        self.ttfb = None  # s from sending the request to the response's status line and headers
        self.end = None  # time.monotonic() when [DONE] arrived
        self.sent = None
        self.chunks = 0  # data chunks with a choice
        self.prompt_tokens = None
        self.completion_tokens = None
        self.finish_reason = None
        self.error = None


def http_json(url, path, api_key, timeout):
    conn = connection(url, timeout)
    try:
        conn.request("GET", path, headers=auth_headers(api_key))
        resp = conn.getresponse()
        body = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"GET {path}: HTTP {resp.status}: {body[:200]!r}")
        return json.loads(body)
    finally:
        conn.close()


def server_metrics(url, api_key, timeout):
    """The server's own counters (/metrics, Prometheus text): {name without gpu_accel_: value}; {} if none."""
    conn = connection(url, timeout)
    try:
        conn.request("GET", "/metrics", headers=auth_headers(api_key))
        resp = conn.getresponse()
        text = resp.read().decode("utf-8", "replace")
        if resp.status != 200:
            return {}
    except (OSError, http.client.HTTPException):
        return {}
    finally:
        conn.close()
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^gpu_accel_(\w+) (\S+)$", text, re.M)}


def connection(url, timeout):
    u = urllib.parse.urlsplit(url)
    if u.scheme != "http":
        raise SystemExit(f"--url must be http://HOST:PORT, got {url}")
    return http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)


def auth_headers(api_key):
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


class HostBusy:
    """Keeps the server's host assistant (serve --host-model) busy: one question after another to /v1/host/ask,
    each streamed to its end, on a thread, until stop(). The host only steps while no main request runs, so the
    lone requests measured meanwhile show what a busy host costs them (issue: TTFT <= 1.05x the idle host's)."""

    QUESTION = ("Describe every figure you were given, one by one, with what it says about the server's load, and "
                "then write a long report of everything an operator should watch over the next hour.")

    def __init__(self, url, api_key, timeout):
        self.url, self.api_key, self.timeout = url, api_key, timeout
        self.stop_flag = threading.Event()
        self.answers, self.bytes, self.errors = 0, 0, []
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        body = json.dumps({"question": self.QUESTION}).encode()
        headers = {"Content-Type": "application/json", **auth_headers(self.api_key)}
        while not self.stop_flag.is_set():
            conn = connection(self.url, self.timeout)
            try:
                conn.request("POST", "/v1/host/ask", body, headers)
                resp = conn.getresponse()
                if resp.status != 200:
                    self.errors.append(f"HTTP {resp.status}: {resp.read()[:200]!r}")
                    self.stop_flag.wait(0.5)
                    continue
                while not self.stop_flag.is_set():
                    chunk = resp.read1(4096) if hasattr(resp, "read1") else resp.read(4096)
                    if not chunk:
                        break
                    self.bytes += len(chunk)
                self.answers += 1
            except (OSError, http.client.HTTPException) as e:
                self.errors.append(str(e))
                self.stop_flag.wait(0.5)
            finally:
                conn.close()

    def stop(self):
        self.stop_flag.set()
        self.thread.join(self.timeout)


def random_prompt(n_vocab, n, seed):
    rng = random.Random(seed)
    return [rng.randrange(3, n_vocab) for _ in range(n)]  # 0..2: the usual special tokens


class StreamClient:
    """HTTP/1.1 over a plain socket, for the streaming requests: the request goes out in one send() and the
    chunked SSE answer is split into lines as it arrives. Why not http.client: its header parsing (the email
    package) and chunked readline cost ~0.2 ms of Python per request on the GPU machine's host, which the TTFT
    of a 1B model's 128-token prompt (~1.7 ms) would count as the server's; this reader adds a few us."""

    def __init__(self, url, timeout, spin=False):
        u = urllib.parse.urlsplit(url)
        self.host, self.port, self.timeout = u.hostname, u.port or 80, timeout
        self.spin = spin  # poll a non-blocking socket in a tight loop instead of sleeping in recv
        self.sock = None
        self.buf = b""

    def connect(self):
        self.sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def close(self):
        if self.sock is not None:
            self.sock.close()

    def send_get(self, path):
        self.sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n\r\n".encode())

    def post_bytes(self, path, body, headers):
        """The whole request (head and body), to be sent with one send()."""
        data = body.encode() if isinstance(body, str) else body
        head = f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nContent-Length: {len(data)}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        return head.encode() + b"\r\n" + data

    def send_bytes(self, request):
        self.sock.sendall(request)
        if self.spin:
            self.sock.setblocking(False)
            self.deadline = time.monotonic() + self.timeout

    def _more(self):
        if self.spin:
            while True:
                try:
                    data = self.sock.recv(65536)
                    break
                except BlockingIOError:
                    if time.monotonic() > self.deadline:
                        raise socket.timeout("no answer within the timeout (spinning reader)")
        else:
            data = self.sock.recv(65536)
        if not data:
            raise http.client.IncompleteRead(self.buf)
        self.buf += data

    def _take_until(self, sep):
        while (i := self.buf.find(sep)) < 0:
            self._more()
        out, self.buf = self.buf[:i], self.buf[i + len(sep):]
        return out

    def _take(self, n):
        while len(self.buf) < n:
            self._more()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_head(self):
        """(status, {lowercase header: value}) of the response."""
        lines = self._take_until(b"\r\n\r\n").decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/"):
            raise http.client.BadStatusLine(lines[0])
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        return int(parts[1]), headers

    def body(self, headers):
        """A whole (non-chunked) body."""
        if "content-length" in headers:
            return self._take(int(headers["content-length"]))
        return b"".join(self.chunks())

    def chunks(self):
        while True:
            size = int(self._take_until(b"\r\n").split(b";")[0], 16)
            if size == 0:
                self._take_until(b"\r\n")  # no trailers are sent
                return
            data = self._take(size)
            self._take(2)
            yield data

    def lines(self):
        """The decoded body's lines, as each arrives (an SSE event is one "data: ..." line)."""
        pending = b""
        for data in self.chunks():
            pending += data
            *complete, pending = pending.split(b"\n")
            yield from complete
        if pending:
            yield pending


def stream_request(conn, body, headers, res, start_event):
    """Sends one streaming completion on an open connection and reads its events into res (one thread)."""
    request = conn.post_bytes("/v1/completions", body, headers)
    start_event.wait()
    res.sent = time.monotonic()
    try:
        conn.send_bytes(request)
        status, head = conn.read_head()
        res.ttfb = time.monotonic() - res.sent
        if status != 200:
            res.error = f"HTTP {status}: {conn.body(head)[:300].decode('utf-8', 'replace')}"
            return
        done = False
        for line in conn.lines():
            now = time.monotonic()  # before any parsing: the arrival time
            if not line.startswith(b"data:"):
                continue  # comments (": started", ": waiting"), blank lines between events
            data = line[5:].strip()
            if data == b"[DONE]":
                done = True
                res.end = now
                break
            if res.ttft is None or b'"error":' in data or b'"usage":{' in data or b'"finish_reason":"' in data:
                event = json.loads(data)
                if "error" in event:
                    err = event["error"]
                    res.error = f"error event: {err.get('message', err) if isinstance(err, dict) else err}"
                    continue
                if event.get("usage"):
                    res.prompt_tokens = event["usage"].get("prompt_tokens")
                    res.completion_tokens = event["usage"].get("completion_tokens")
                for choice in event.get("choices", []):
                    if choice.get("finish_reason"):
                        res.finish_reason = choice["finish_reason"]
                if event.get("choices"):
                    res.chunks += 1
                    if res.ttft is None:
                        res.ttft = now - res.sent
            else:
                res.chunks += 1  # a plain delta: only counted (see the note on parsing above)
        if not done and res.error is None:
            res.error = "stream ended without data: [DONE]"
    except (OSError, http.client.HTTPException, ValueError) as e:
        res.error = f"{type(e).__name__}: {e}"
    finally:
        conn.close()


def worker_main(pipe, release):
    """A client process: per round, opens its connections, says ready, waits for the release, streams."""
    while True:
        task = pipe.recv()
        if task is None:
            return
        local_release = threading.Event()
        results, threads = [], []
        for body in task["bodies"]:
            res = Result()
            results.append(res)
            try:
                conn = StreamClient(task["url"], task["timeout"], task.get("spin", False))
                conn.connect()  # before the release: the round measures requests, not handshakes
            except OSError as e:
                res.error = f"connect: {e}"
                continue
            t = threading.Thread(target=stream_request, args=(conn, body, task["headers"], res, local_release),
                                 daemon=True)
            t.start()
            threads.append(t)
        pipe.send("ready")
        release.wait()
        local_release.set()
        cpu0 = time.process_time()
        for t in threads:
            t.join(task["timeout"])
        cpu = time.process_time() - cpu0
        pipe.send({"results": [vars(r) for r in results], "cpu_s": cpu})


class ClientPool:
    """P client processes, each running its share of a round's clients on threads. One Python process holds
    the GIL for all its streams: at tens of thousands of chunks a second, one process would pace the round."""

    def __init__(self, processes):
        ctx = multiprocessing.get_context("spawn")  # no fork of a process with threads
        self.release = ctx.Event()
        self.workers = []
        for _ in range(processes):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=worker_main, args=(child, self.release), daemon=True)
            proc.start()
            self.workers.append((proc, parent))

    def close(self):
        for proc, pipe in self.workers:
            try:
                pipe.send(None)
            except OSError:
                pass
            proc.join(5)

    def round(self, bodies, headers, args, spin=False):
        """Runs one round; returns (results in body order, release time, CPU seconds of each busy process)."""
        self.release.clear()
        shares = [bodies[i::len(self.workers)] for i in range(len(self.workers))]
        busy = [(w, share) for w, share in zip(self.workers, shares) if share]
        for (_, pipe), share in busy:
            pipe.send({"url": args.url, "timeout": args.timeout, "headers": headers, "bodies": share, "spin": spin})
        for (_, pipe), _ in busy:
            if pipe.recv() != "ready":
                raise RuntimeError("a client process failed to start its round")
        t0 = time.monotonic()
        self.release.set()
        per_worker = [pipe.recv() for (_, pipe), _ in busy]
        results = [None] * len(bodies)
        for k, answer in enumerate(per_worker):
            for j, fields in enumerate(answer["results"]):
                res = Result()
                vars(res).update(fields)
                results[k + j * len(self.workers)] = res  # undo the i::P split
        return results, t0, [a["cpu_s"] for a in per_worker]


def http_round_trips_ms(url, timeout, repeats, idle_s=0.02):
    """The HTTP floor a lone request's TTFT includes: GET /health (the server does next to nothing) on a connection
    opened beforehand, as the lone requests' are, after the same kind of idle gap, timed from the send to the whole
    answer with the same socket reader as the streams. The way in and out of a completion (socket, HTTP thread
    wake-ups, the client's own wake-up) costs about this much on top of the server's own work. A fresh connection
    each time: the server closes a keep-alive connection after a few requests."""
    times = []
    for _ in range(repeats):
        c = StreamClient(url, timeout)
        c.connect()
        try:
            time.sleep(idle_s)
            t0 = time.perf_counter()
            c.send_get("/health")
            status, headers = c.read_head()
            c.body(headers)
            times.append((time.perf_counter() - t0) * 1e3)
        finally:
            c.close()
        if status != 200:
            raise http.client.HTTPException(f"/health answered {status}")
    return times


def run_round(args, pool, n_vocab, model, clients, round_index, max_tokens=None, spin=False):
    max_tokens = max_tokens or args.max_tokens
    headers = {"Content-Type": "application/json", **auth_headers(args.api_key)}
    bodies = []
    for i in range(clients):
        prompt = random_prompt(n_vocab, args.prompt_tokens, args.seed * 1_000_003 + round_index * 65_537 + i)
        body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True}}
        if model:
            body["model"] = model
        bodies.append(json.dumps(body))
    before = server_metrics(args.url, args.api_key, args.timeout)
    results, t0, cpu = pool.round(bodies, headers, args, spin)
    wall = time.monotonic() - t0
    after = server_metrics(args.url, args.api_key, args.timeout)

    def server_mean_ms(name):  # the round's mean of a server-side histogram: its sum and count deltas
        key_sum, key_count = name + "_sum", name + "_count"
        if key_sum not in before or key_sum not in after:
            return None
        n = after[key_count] - before[key_count]
        return 1e3 * (after[key_sum] - before[key_sum]) / n if n > 0 else None
    for res in results:
        if res.error is None and res.end is None:
            res.error = f"no answer within --timeout {args.timeout} s"
        if res.error is None:
            if res.completion_tokens is None:
                res.error = "no usage chunk (stream_options.include_usage)"
            elif res.prompt_tokens != args.prompt_tokens:
                res.error = f"usage.prompt_tokens {res.prompt_tokens}, sent {args.prompt_tokens}"
            elif res.completion_tokens != max_tokens:
                res.error = f"usage.completion_tokens {res.completion_tokens}, asked {max_tokens} (ignore_eos)"
            elif res.finish_reason != "length":
                res.error = f"finish_reason {res.finish_reason!r}, expected 'length'"
            elif res.ttft is None:
                res.error = "no chunk with a choice"
    ok = [r for r in results if r.error is None]
    ends = [r.end for r in ok]
    generated = sum(r.completion_tokens for r in ok)
    span = (max(ends) - t0) if ends else wall
    ttfts = [r.ttft for r in ok]
    ttfbs = [r.ttfb for r in ok]
    # Time per output token after the first, per request: (end - first token) / (tokens - 1).
    tpots = [(r.end - r.sent - r.ttft) / (r.completion_tokens - 1) for r in ok if r.completion_tokens > 1]
    return {
        "clients": clients,
        "generated": generated,
        "wall_s": span,
        "aggregate_tok_s": generated / span if span > 0 else 0.0,
        "ttft_mean_ms": 1e3 * statistics.mean(ttfts) if ttfts else None,
        "ttft_median_ms": 1e3 * statistics.median(ttfts) if ttfts else None,
        "ttft_max_ms": 1e3 * max(ttfts) if ttfts else None,
        # The headers come as soon as the request is queued: this is the request's way in (socket, parsing,
        # tokenization, submit), the rest of the TTFT is the prefill and the first token's way out.
        "ttfb_mean_ms": 1e3 * statistics.mean(ttfbs) if ttfbs else None,
        "tpot_mean_ms": 1e3 * statistics.mean(tpots) if tpots else None,
        # The server's view of the same requests (submit -> first token, submit -> last token): what the
        # client sees beyond these is the HTTP path (socket, parsing, SSE, the client itself).
        "server_ttft_mean_ms": server_mean_ms("time_to_first_token_seconds"),
        "server_duration_mean_ms": server_mean_ms("request_duration_seconds"),
        "release_to_send_max_ms": 1e3 * max(r.sent - t0 for r in results if r.sent is not None)
        if any(r.sent is not None for r in results) else None,
        "chunks": sum(r.chunks for r in ok),
        "failed": len(results) - len(ok),
        "errors": sorted({r.error for r in results if r.error is not None}),
        "client_processes": min(clients, len(pool.workers)),
        "client_cpu_pct": 100.0 * max(cpu) / wall if wall > 0 else 0.0,  # the busiest client process
        # Per request, CLOCK_MONOTONIC (the clock of every process on this machine, the server's too): when it
        # was sent, and its TTFB and TTFT, to be matched with `serve --trace-timing`'s lines.
        "request_times": [{"sent_s": r.sent, "ttfb_ms": 1e3 * r.ttfb, "ttft_ms": 1e3 * r.ttft} for r in ok],
    }


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def print_table(rounds, args, out=sys.stdout):
    print(f"HTTP /v1/completions, stream, prompt {args.prompt_tokens} token ids, max_tokens {args.max_tokens}, "
          f"temperature 0, ignore_eos ({args.url})", file=out)
    print("| clients | generated | wall s | aggregate tok/s | TTFT mean ms | TTFT median ms | TTFT max ms "
          "| server TTFT mean ms | TPOT mean ms | failed | client procs | max client CPU % |", file=out)
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|", file=out)
    for r in rounds:
        print(f"| {r['clients']} | {r['generated']} | {r['wall_s']:.3f} | {r['aggregate_tok_s']:.1f} "
              f"| {fmt(r['ttft_mean_ms'], '.2f')} | {fmt(r['ttft_median_ms'], '.2f')} | {fmt(r['ttft_max_ms'], '.2f')} "
              f"| {fmt(r['server_ttft_mean_ms'], '.2f')} | {fmt(r['tpot_mean_ms'], '.3f')} | {r['failed']} | {r['client_processes']} | {r['client_cpu_pct']:.0f} |",
              file=out)
    for r in rounds:
        for e in r["errors"]:
            print(f"  {r['clients']} clients: {e}", file=out)
    one = next((r for r in rounds if r["clients"] == 1 and r["aggregate_tok_s"] > 0), None)
    most = max(rounds, key=lambda r: r["clients"])
    if one and most is not one:
        print(f"aggregate {most['clients']} clients / 1 client: {most['aggregate_tok_s'] / one['aggregate_tok_s']:.2f}x",
              file=out)


def start_server(command, timeout, log_path):
    """Starts `gpu-accel serve ... --port 0` and returns (process, url) once its "listening on" line appears.
    Its stderr goes on being read (and written to log_path when given), so the server never blocks on it."""
    proc = subprocess.Popen(shlex.split(command), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, errors="replace")
    log_file = open(log_path, "w") if log_path else None
    deadline = time.monotonic() + timeout
    url = None
    log = []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        log.append(line)
        if log_file:
            log_file.write(line)
            log_file.flush()
        m = re.search(r"listening on (http://\S+)", line)
        if m:
            url = m.group(1)
            break
    if url is None:
        proc.kill()
        raise SystemExit("the server did not start:\n" + "".join(log[-20:]))

    def drain():
        for rest in proc.stderr:
            if log_file:
                log_file.write(rest)
                log_file.flush()

    threading.Thread(target=drain, daemon=True).start()
    return proc, url


def wait_healthy(url, timeout):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            conn = connection(url, 5)
            conn.request("GET", "/health")
            resp = conn.getresponse()
            resp.read()
            conn.close()
            if resp.status == 200:
                return
            last = f"HTTP {resp.status}"
        except OSError as e:
            last = str(e)
        time.sleep(0.2)
    raise SystemExit(f"{url}/health did not answer 200 within {timeout} s ({last})")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default="http://127.0.0.1:8080", help="the server (http://HOST:PORT)")
    p.add_argument("--server-cmd", help="start this server command (with --port 0) first and stop it at the end")
    p.add_argument("--server-log", help="with --server-cmd: write the server's stderr to this file")
    p.add_argument("--clients", default="1,16,64", help="concurrent clients per round, comma-separated; 0: no "
                   "rounds (only the --ttft-repeats lone requests)")
    p.add_argument("--prompt-tokens", type=int, default=128, help="prompt length (token ids) of every request")
    p.add_argument("--max-tokens", type=int, default=128, help="tokens generated by every request")
    p.add_argument("--api-key", default=os.environ.get("GPU_ACCEL_API_KEY"), help="Bearer key (default: "
                   "$GPU_ACCEL_API_KEY)")
    p.add_argument("--vocab-size", type=int, help="draw prompt ids below this (default: the server's n_vocab, "
                   "from /api/stats)")
    p.add_argument("--seed", type=int, default=1, help="prompt seed")
    p.add_argument("--processes", type=int, default=max(1, min(8, (os.cpu_count() or 2) // 2)),
                   help="client processes a round's clients are spread over (default: half the cores, at most 8)")
    p.add_argument("--no-warmup", action="store_true", help="skip the 1-client 8-token warm-up request")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds a request may take")
    p.add_argument("--ttft-repeats", type=int, default=0, help="then K lone requests one after another (8 tokens): "
                   "TTFT median/min of a single client, steadier than one round's single request")
    p.add_argument("--host-busy", action="store_true", help="keep the server's host assistant (serve --host-model) "
                   "busy with /v1/host/ask questions during the lone requests")
    p.add_argument("--json", help="write the rounds as JSON to this file")
    p.add_argument("--check", action="store_true", help="exit 1 when any request failed")
    args = p.parse_args()
    try:
        counts = [] if args.clients.strip() == "0" else [int(c) for c in args.clients.split(",")]
    except ValueError:
        raise SystemExit(f"--clients takes counts separated by commas (or 0), got {args.clients!r}")
    if not counts and args.ttft_repeats < 1:
        raise SystemExit("--clients 0 needs --ttft-repeats K >= 1")
    if (counts and min(counts) < 1) or args.prompt_tokens < 1 or args.max_tokens < 2 or args.processes < 1:
        raise SystemExit("--clients >= 1, --prompt-tokens >= 1, --max-tokens >= 2 and --processes >= 1")

    proc, pool = None, None
    round_trips = []
    if args.server_cmd:
        proc, args.url = start_server(args.server_cmd, args.timeout, args.server_log)
    try:
        wait_healthy(args.url, args.timeout)
        pool = ClientPool(min(args.processes, max(counts + [1])))
        stats = http_json(args.url, "/api/stats", args.api_key, args.timeout)
        n_vocab = args.vocab_size or stats["model"]["n_vocab"]
        models = http_json(args.url, "/v1/models", args.api_key, args.timeout)
        model = models["data"][0]["id"] if models.get("data") else None
        print(f"server {args.url}: model {model}, n_vocab {n_vocab}, n_ctx {stats['model'].get('n_ctx')}, "
              f"device {stats['scheduler'].get('device')}, max_running {stats['scheduler'].get('max_running')}",
              file=sys.stderr)
        if not args.no_warmup:
            warm = run_round(args, pool, n_vocab, model, 1, 0, max_tokens=min(args.max_tokens, 8))
            if warm["failed"]:
                print(f"warm-up failed: {warm['errors']}", file=sys.stderr)
        rounds = [run_round(args, pool, n_vocab, model, n, i + 1) for i, n in enumerate(counts)]
        # Lone requests with both readers, alternating (so both see the same machine state); the prompt seeds
        # differ between all of them (no prefix is shared).
        lone, lone_spin = [], []
        host = HostBusy(args.url, args.api_key, args.timeout) if args.host_busy and args.ttft_repeats else None
        if host is not None:
            time.sleep(1.0)  # the host's first question is under way before the first lone request
        for k in range(args.ttft_repeats):
            lone.append(run_round(args, pool, n_vocab, model, 1, 1000 + 2 * k, max_tokens=min(args.max_tokens, 8)))
            lone_spin.append(run_round(args, pool, n_vocab, model, 1, 1001 + 2 * k, max_tokens=min(args.max_tokens, 8),
                                       spin=True))
        if host is not None:
            host.stop()
            print(f"host kept busy: {host.answers} answers, {host.bytes} bytes streamed, errors {host.errors[:3]}",
                  file=sys.stderr)
            if host.bytes == 0:
                raise SystemExit("--host-busy: the host streamed nothing (is the server run with --host-model?)")
        round_trips = http_round_trips_ms(args.url, args.timeout, 15) if args.ttft_repeats else []
    finally:
        if pool is not None:
            pool.close()
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
    if rounds:
        print_table(rounds, args)
    lone_ttft = [r["ttft_mean_ms"] for r in lone if r["failed"] == 0]
    lone_server = [r["server_ttft_mean_ms"] for r in lone if r["failed"] == 0 and r["server_ttft_mean_ms"]]
    lone_ttfb = [r["ttfb_mean_ms"] for r in lone if r["failed"] == 0]
    spin_ttft = [r["ttft_mean_ms"] for r in lone_spin if r["failed"] == 0]
    if lone:
        print(f"lone requests of {args.prompt_tokens} prompt ids, one after another: {len(lone_ttft)}/{len(lone)} ok, "
              f"TTFT median "
              f"{fmt(statistics.median(lone_ttft) if lone_ttft else None, '.2f')} ms, min "
              f"{fmt(min(lone_ttft) if lone_ttft else None, '.2f')} ms; server-side median "
              f"{fmt(statistics.median(lone_server) if lone_server else None, '.2f')} ms; response headers (TTFB) median "
              f"{fmt(statistics.median(lone_ttfb) if lone_ttfb else None, '.2f')} ms")
        print(f"the same with the spinning reader (the client polls its socket): {len(spin_ttft)}/{len(lone_spin)} ok, "
              f"TTFT median {fmt(statistics.median(spin_ttft) if spin_ttft else None, '.2f')} ms, min "
              f"{fmt(min(spin_ttft) if spin_ttft else None, '.2f')} ms")
        print(f"HTTP round trip (GET /health on an open connection after 20 ms idle, {len(round_trips)} times): "
              f"median {fmt(statistics.median(round_trips) if round_trips else None, '.3f')} ms, min "
              f"{fmt(min(round_trips) if round_trips else None, '.3f')} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"url": args.url, "prompt_tokens": args.prompt_tokens, "max_tokens": args.max_tokens,
                       "rounds": rounds, "lone_ttft_ms": lone_ttft, "lone_server_ttft_ms": lone_server,
                       "lone_ttfb_ms": lone_ttfb, "http_round_trip_ms": round_trips,
                       "lone_request_times": [t for r in lone if r["failed"] == 0 for t in r["request_times"]],
                       "lone_spin_ttft_ms": spin_ttft,
                       "lone_spin_request_times": [t for r in lone_spin if r["failed"] == 0
                                                   for t in r["request_times"]]},
                      f, indent=1)
    failed = sum(r["failed"] for r in rounds + lone + lone_spin)
    if args.check and failed:
        print(f"FAILED: {failed} request(s)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
