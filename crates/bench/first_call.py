#!/usr/bin/env python3
"""The first call as a DM's MCP client meets it: spawn `toolhost serve --stdio`,
send `initialize`, then `tools/call roll`, and time each answer from the
moment the process was started.

    python3 crates/bench/first_call.py BINARY [BINARY ...]   # 10 runs each

Rows, for each binary, alternated run by run so both see the same machine:
- process start: `BINARY --version` to its exit;
- fresh: a new state directory and compile cache (empty) every run;
- warm: one state directory, its cache filled by a run before the timed ones.
Prints medians and maxima in milliseconds, as a Markdown table.
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

RUNS = 10


def first_call(binary, state):
    env = dict(os.environ, TOOLHOST_STATE_DIR=state, TOOLHOST_CACHE_DIR=os.path.join(state, "cache"), RUST_LOG="warn")
    env.pop("TOOLHOST_ALLOW_UNSIGNED", None)
    t0 = time.perf_counter()
    p = subprocess.Popen(
        [binary, "serve", "--stdio"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=state,
    )

    def send(msg):
        p.stdin.write((json.dumps(msg) + "\n").encode())
        p.stdin.flush()

    def answer(id_):
        while True:
            line = p.stdout.readline()
            if not line:
                raise RuntimeError(f"{binary} ended before answering {id_}")
            msg = json.loads(line)
            if msg.get("id") == id_:
                return msg

    send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
          "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                     "clientInfo": {"name": "first-call", "version": "1"}}})
    answer(1)
    t_init = time.perf_counter() - t0
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    send({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
          "params": {"name": "roll", "arguments": {"expression": "1d20"}}})
    reply = answer(2)
    t_call = time.perf_counter() - t0
    assert not reply.get("result", {}).get("isError"), reply
    p.stdin.close()
    p.wait(timeout=30)
    return t_init * 1000, t_call * 1000


def start_only(binary):
    t0 = time.perf_counter()
    subprocess.run([binary, "--version"], stdout=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - t0) * 1000


def main():
    binaries = [os.path.abspath(b) for b in sys.argv[1:]]
    if not binaries:
        sys.exit(__doc__)
    rows = {b: {"start": [], "fresh_init": [], "fresh_call": [], "warm_init": [], "warm_call": []} for b in binaries}
    warm = {b: tempfile.mkdtemp(prefix="toolhost-warm-") for b in binaries}
    for b in binaries:
        first_call(b, warm[b])  # fills the cache
    for _ in range(RUNS):
        for b in binaries:
            rows[b]["start"].append(start_only(b))
            fresh = tempfile.mkdtemp(prefix="toolhost-fresh-")
            try:
                i, c = first_call(b, fresh)
            finally:
                shutil.rmtree(fresh, ignore_errors=True)
            rows[b]["fresh_init"].append(i)
            rows[b]["fresh_call"].append(c)
            i, c = first_call(b, warm[b])
            rows[b]["warm_init"].append(i)
            rows[b]["warm_call"].append(c)
    for d in warm.values():
        shutil.rmtree(d, ignore_errors=True)
    print(f"| binary | what (ms after process start, {RUNS} runs) | p50 | max |")
    print("|---|---|---|---|")
    names = {"start": "process start alone (`--version`)",
             "fresh_init": "fresh state dir: `initialize` answered",
             "fresh_call": "fresh state dir: first `roll` answered",
             "warm_init": "warm cache: `initialize` answered",
             "warm_call": "warm cache: first `roll` answered"}
    for b in binaries:
        for k, label in names.items():
            v = rows[b][k]
            print(f"| {b} | {label} | {statistics.median(v):.0f} | {max(v):.0f} |")


if __name__ == "__main__":
    main()
