#!/usr/bin/env python3
"""Where a lone request's time to first token goes, over HTTP (issue 5, dev probe).

Sends N lone streaming completions of P random token ids (max_tokens 2) to a running `gpu-accel serve`, one at a
time on fresh connections, from a plain socket, and per request records: the response head's arrival (the way in:
socket, parsing, submit), the first data event's arrival (TTFT as a client sees it) and the server's own TTFT (the
delta of /metrics' time_to_first_token sum: submit -> first token). Prints the medians and client - server.
Usage: ttft_probe.py PORT PROMPT_TOKENS N [N_VOCAB]
"""
import json
import random
import socket
import statistics
import sys
import time
import urllib.request

port, n_prompt, n = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
n_vocab = int(sys.argv[4]) if len(sys.argv) > 4 else 32000


def ttft_sum():
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    for line in text.splitlines():
        if line.startswith("gpu_accel_time_to_first_token_seconds_sum"):
            return float(line.split()[1])
    raise SystemExit("no time_to_first_token_seconds_sum in /metrics")


rng = random.Random(n_prompt)
rows = []
for i in range(n):
    prompt = [rng.randrange(3, n_vocab) for _ in range(n_prompt)]
    body = json.dumps({"prompt": prompt, "max_tokens": 2, "temperature": 0, "stream": True,
                       "ignore_eos": True}).encode()
    req = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    before = ttft_sum()
    time.sleep(0.002)
    t0 = time.perf_counter()
    s.sendall(req)
    buf, t_head = b"", None
    while b"data: {" not in buf:
        data = s.recv(65536)
        if not data:
            raise SystemExit(f"connection closed: {buf[:300]!r}")
        if t_head is None and b"\r\n\r\n" in buf + data:
            t_head = time.perf_counter()
        buf += data
    t_first = time.perf_counter()
    while b"[DONE]" not in buf:
        buf += s.recv(65536)
    s.close()
    time.sleep(0.002)
    rows.append(((t_head - t0) * 1e3, (t_first - t0) * 1e3, (ttft_sum() - before) * 1e3))
med = lambda k: statistics.median(r[k] for r in rows)
print(f"prompt {n_prompt} ids, {n} lone requests: head {med(0):.3f} ms, first data {med(1):.3f} ms, "
      f"server TTFT {med(2):.3f} ms, client - server {statistics.median(r[1] - r[2] for r in rows):.3f} ms "
      f"(min first data {min(r[1] for r in rows):.3f})")
