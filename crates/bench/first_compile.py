#!/usr/bin/env python3
"""A plugin's first answer as a DM meets it: a serving host, an empty compile
cache, `toolhost plugin add FILE`, then the first `tools/call` of one of its
tools over MCP (streamable HTTP). Times are from the start of `plugin add`.

    python3 crates/bench/first_compile.py BINARY NAME=FILE:TOOL:ARGS_JSON ... [--runs N]

For each plugin and each `limits.compile` (`optimized`: the code before this
change, compiled optimized before the first call; `fast-first`: fast code
first, optimized in the background), N runs (default 5) alternated, each
with a new state directory and an empty cache. Also read from the host's log:
the fast and the optimized compile times. Then, per plugin, the latency of
a call (p50 of 200, after 20 warm-up) on fast code (`limits.compile: fast`)
and on optimized code. Prints Markdown tables.
"""

import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

TIMEOUT = 300


def serve(binary, state, compile_mode):
    os.makedirs(state, exist_ok=True)
    with open(os.path.join(state, "toolhost.yaml"), "w") as f:
        f.write(f"limits:\n  compile: {compile_mode}\nserver:\n  rate_limit: {{ per_minute: 0 }}\n")
    env = dict(os.environ, TOOLHOST_STATE_DIR=os.path.join(state, "state"),
               TOOLHOST_CACHE_DIR=os.path.join(state, "cache"), TOOLHOST_ALLOW_UNSIGNED="1")
    log = open(os.path.join(state, "stderr.log"), "w")
    p = subprocess.Popen([binary, "serve", "--http", "127.0.0.1:0"], stdout=subprocess.PIPE,
                         stderr=log, env=env, cwd=state)
    banner = p.stdout.readline().decode()
    url = banner.split()[-1]
    return p, url, env


def rpc(url, session, msg):
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": "2025-06-18"}
    if session:
        headers["Mcp-Session-Id"] = session
    req = urllib.request.Request(url + "/mcp", data=json.dumps(msg).encode(), headers=headers)
    with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
        sid = r.headers.get("Mcp-Session-Id") or session
        body = r.read().decode()
    if "id" not in msg:
        return sid, None
    if body.lstrip().startswith("{"):
        return sid, json.loads(body)
    for line in body.splitlines():
        if line.startswith("data:") and line[5:].strip():
            v = json.loads(line[5:])
            if v.get("id") == msg["id"]:
                return sid, v
    raise RuntimeError(f"no answer to {msg['method']}: {body[:300]}")


def session(url):
    sid, _ = rpc(url, None, {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                             "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                        "clientInfo": {"name": "first-compile", "version": "1"}}})
    rpc(url, sid, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    return sid


def call(url, sid, tool, args, n=2):
    _, v = rpc(url, sid, {"jsonrpc": "2.0", "id": n, "method": "tools/call",
                          "params": {"name": tool, "arguments": args}})
    if "error" in v or v["result"].get("isError"):
        raise RuntimeError(f"{tool}: {json.dumps(v)[:300]}")
    return v


@contextlib.contextmanager
def host(binary, compile_mode):
    """A serving host in a new directory (empty cache) and an MCP session:
    yields (dir, url, session id, env); the host stopped and the directory
    removed after."""
    d = tempfile.mkdtemp(prefix="first-compile-")
    try:
        p, url, env = serve(binary, d, compile_mode)
        try:
            yield d, url, session(url), env
        finally:
            p.terminate()
            p.wait()
    finally:
        shutil.rmtree(d, ignore_errors=True)


def plugin_add(binary, wasm, env, d):
    add = subprocess.run([binary, "plugin", "add", wasm], env=env, cwd=d, capture_output=True, text=True)
    if add.returncode != 0:
        raise RuntimeError(add.stderr)


def first_answer(binary, wasm, tool, args, compile_mode):
    with host(binary, compile_mode) as (d, url, sid, env):
        t0 = time.perf_counter()
        plugin_add(binary, wasm, env, d)
        call(url, sid, tool, args)
        first = (time.perf_counter() - t0) * 1000
        optimized_ms = None
        if compile_mode == "fast-first":
            deadline = time.time() + TIMEOUT
            while optimized_ms is None and time.time() < deadline:
                m = re.search(r"runs on optimized code now \(compiled in the background in (\d+) ms",
                              open(os.path.join(d, "stderr.log")).read())
                optimized_ms = m and int(m.group(1))
                time.sleep(0.2)
        log = open(os.path.join(d, "stderr.log")).read()
        m = re.search(r"compile of plugin \S+ done in (\d+) ms \((fast code[^)]*|optimized code)\)", log)
        compile_ms = int(m.group(1)) if m else None
        return first, compile_ms, optimized_ms


def call_latency(binary, wasm, tool, args, compile_mode):
    with host(binary, compile_mode) as (d, url, sid, env):
        plugin_add(binary, wasm, env, d)
        for i in range(20):
            call(url, sid, tool, args, 10 + i)
        times = []
        for i in range(200):
            t = time.perf_counter()
            call(url, sid, tool, args, 100 + i)
            times.append((time.perf_counter() - t) * 1000)
        return statistics.median(times)


def main():
    argv = sys.argv[1:]
    runs = 5
    if "--runs" in argv:
        i = argv.index("--runs")
        runs = int(argv[i + 1])
        del argv[i:i + 2]
    binary, specs = argv[0], argv[1:]
    plugins = []
    for spec in specs:
        name, rest = spec.split("=", 1)
        wasm, tool, args = rest.split(":", 2)
        plugins.append((name, wasm, tool, json.loads(args)))
    print("| plugin | size | `limits.compile` | `plugin add` to first answer p50 | max | compile before the first answer p50 | optimized compile in the background p50 |")
    print("|---|---|---|---|---|---|---|")
    for name, wasm, tool, args in plugins:
        rows = {"optimized": [], "fast-first": []}
        for _ in range(runs):
            for mode in rows:
                rows[mode].append(first_answer(binary, wasm, tool, args, mode))
        size = os.path.getsize(wasm) / 1e6
        for mode, rs in rows.items():
            firsts = [r[0] for r in rs]
            comp = [r[1] for r in rs if r[1] is not None]
            opt = [r[2] for r in rs if r[2] is not None]
            print(f"| {name} | {size:.1f} MB | {mode} | {statistics.median(firsts):,.0f} ms | {max(firsts):,.0f} ms | "
                  f"{statistics.median(comp):,.0f} ms | {statistics.median(opt):,.0f} ms |" if opt else
                  f"| {name} | {size:.1f} MB | {mode} | {statistics.median(firsts):,.0f} ms | {max(firsts):,.0f} ms | "
                  f"{statistics.median(comp):,.0f} ms | – |", flush=True)
    print()
    print("| plugin | call p50 on fast code | on optimized code | ratio |")
    print("|---|---|---|---|")
    for name, wasm, tool, args in plugins:
        fast = call_latency(binary, wasm, tool, args, "fast")
        opt = call_latency(binary, wasm, tool, args, "optimized")
        print(f"| {name} | {fast:.2f} ms | {opt:.2f} ms | {fast / opt:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
