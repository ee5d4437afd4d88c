#!/usr/bin/env python3
"""What a plugin costs in each language (#51, item 6): the weather tool in
Rust, JavaScript and Python, through a serving host as a DM meets it.

    python3 crates/bench/languages.py BINARY rust=WASM js=WASM python=WASM [--runs N]

Each weather tool is granted a local HTTP origin (an Open-Meteo-shaped
answer written in one write, TCP_NODELAY) and given its key. Per language:
- the component's size;
- `plugin add` to the first answer of `weather_now` over MCP, from an empty
  compile cache, with `limits.compile: optimized` (before #51: optimized
  code before the first call) and `fast-first` (now), N runs each (default
  3), alternated; the fast and optimized compile times from the host's log;
- once on optimized code: 200 calls after 20 warm-up, and the p50 of the
  host's own wall time per call (the audit's `duration_ms`: a fresh
  instance, the request to the origin, the answer) and of the instance's
  peak linear memory (`peak_memory_bytes`), with the round trip p50.
Prints Markdown tables.
"""

import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from first_compile import TIMEOUT, call, session  # noqa: E402

ARGS = {"latitude": 52.52, "longitude": 13.41}


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


ORIGIN = r"""
import http.server, json, socket, sys

class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        body = json.dumps({"current": {"temperature_2m": 12.5, "wind_speed_10m": 3.4},
                           "authorization": self.headers.get("Authorization")}).encode()
        # One write: headers and body together (no Nagle/delayed-ACK stall).
        head = (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        self.wfile.write(head + body)
    def log_message(self, *a):
        pass

class S(http.server.ThreadingHTTPServer):
    def get_request(self):
        c, a = super().get_request()
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return c, a

S(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def origin():
    """An Open-Meteo-shaped origin answering in one write."""
    port = free_port()
    p = subprocess.Popen([sys.executable, "-c", ORIGIN, str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return p, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("the origin did not start")


class Host:
    """A serving host in a new directory (empty cache), weather granted the
    origin and given its key; an MCP session."""

    def __init__(self, binary, compile_mode, api):
        self.binary = binary
        self.d = tempfile.mkdtemp(prefix="languages-")
        with open(os.path.join(self.d, "toolhost.yaml"), "w") as f:
            f.write(f"limits:\n  compile: {compile_mode}\nserver:\n  rate_limit: {{ per_minute: 0 }}\n"
                    f"plugins:\n  builtins: false\n  grants:\n    weather:\n      http: [\"{api}\"]\n"
                    f"  config:\n    weather:\n      base_url: \"{api}\"\n")
        self.env = dict(os.environ, TOOLHOST_STATE_DIR=os.path.join(self.d, "state"),
                        TOOLHOST_CACHE_DIR=os.path.join(self.d, "cache"), TOOLHOST_ALLOW_UNSIGNED="1")
        self.log = os.path.join(self.d, "stderr.log")
        self.p = subprocess.Popen([binary, "serve", "--http", "127.0.0.1:0"], stdout=subprocess.PIPE,
                                  stderr=open(self.log, "w"), env=self.env, cwd=self.d)
        self.url = self.p.stdout.readline().decode().split()[-1]
        self.sid = session(self.url)
        self.run(["secret", "set", "weather", "api_key"], "sk-bench\n")

    def run(self, args, stdin=None):
        r = subprocess.run([self.binary] + args, env=self.env, cwd=self.d, capture_output=True, text=True, input=stdin)
        if r.returncode != 0:
            raise RuntimeError(f"{args}: {r.stderr}")

    def add(self, wasm):
        shutil.copy(wasm, os.path.join(self.d, "weather.wasm"))
        self.run(["plugin", "add", os.path.join(self.d, "weather.wasm")])

    def logged(self, pattern):
        m = re.search(pattern, open(self.log).read())
        return int(m.group(1)) if m else None

    def wait_optimized(self):
        deadline = time.time() + TIMEOUT
        while time.time() < deadline:
            ms = self.logged(r"runs on optimized code now \(compiled in the background in (\d+) ms")
            if ms is not None:
                return ms
            time.sleep(0.2)
        raise RuntimeError("never optimized")

    def audit(self):
        path = os.path.join(self.d, "state", "audit.jsonl")
        return [json.loads(line) for line in open(path) if '"event":"call"' in line.replace(" ", "")]

    def close(self):
        self.p.terminate()
        self.p.wait()
        shutil.rmtree(self.d, ignore_errors=True)


def first_answer(binary, wasm, mode, api):
    h = Host(binary, mode, api)
    try:
        t0 = time.perf_counter()
        h.add(wasm)
        call(h.url, h.sid, "weather_now", ARGS)
        first = (time.perf_counter() - t0) * 1000
        compiled = h.logged(r"compile of plugin weather done in (\d+) ms")
        optimized = h.wait_optimized() if mode == "fast-first" else compiled
        fast = compiled if mode == "fast-first" else None
        return first, fast, optimized
    finally:
        h.close()


def steady(binary, wasm, api):
    h = Host(binary, "fast-first", api)
    try:
        h.add(wasm)
        h.wait_optimized()
        for i in range(20):
            call(h.url, h.sid, "weather_now", ARGS, 10 + i)
        trips = []
        for i in range(200):
            t = time.perf_counter()
            call(h.url, h.sid, "weather_now", ARGS, 100 + i)
            trips.append((time.perf_counter() - t) * 1000)
        records = [r for r in h.audit() if r.get("tool") == "weather_now" and r.get("outcome") == "ok"][-200:]
        return (statistics.median(trips), statistics.median(r["duration_ms"] for r in records),
                statistics.median(r["peak_memory_bytes"] for r in records), len(records))
    finally:
        h.close()


def main():
    argv = sys.argv[1:]
    runs = 3
    if "--runs" in argv:
        i = argv.index("--runs")
        runs = int(argv[i + 1])
        del argv[i:i + 2]
    binary, specs = argv[0], [a.split("=", 1) for a in argv[1:]]
    server, api = origin()
    try:
        print("| language | component | fast compile p50 | optimized compile p50 | `plugin add` to first answer, before (optimized first) p50 | now (fast first) p50 | ratio |")
        print("|---|---|---|---|---|---|---|")
        for lang, wasm in specs:
            rows = {"optimized": [], "fast-first": []}
            for _ in range(runs):
                for mode in rows:
                    rows[mode].append(first_answer(binary, wasm, mode, api))
            before = statistics.median(r[0] for r in rows["optimized"])
            now = statistics.median(r[0] for r in rows["fast-first"])
            fast = statistics.median(r[1] for r in rows["fast-first"] if r[1] is not None)
            opt = statistics.median(r[2] for r in rows["optimized"] if r[2] is not None)
            print(f"| {lang} | {os.path.getsize(wasm) / 2**20:.1f} MiB | {fast:,.0f} ms | {opt:,.0f} ms | "
                  f"{before:,.0f} ms | **{now:,.0f} ms** | {before / now:.1f}x |", flush=True)
        print()
        print("| language | call round trip p50 | host wall time per call p50 (fresh instance + request) | instance peak memory p50 | calls |")
        print("|---|---|---|---|---|")
        for lang, wasm in specs:
            trip, wall, mem, n = steady(binary, wasm, api)
            print(f"| {lang} | {trip:.2f} ms | {wall:.2f} ms | {mem / 2**20:.1f} MiB | {n} |", flush=True)
    finally:
        server.terminate()


if __name__ == "__main__":
    main()
