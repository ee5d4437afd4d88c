#!/usr/bin/env python3
"""The clients bench's plain client (benches/clients.rs): no SDK, stdlib only,
blocking. Writes one JSON-RPC request line to the server's stdin, reads lines
from its stdout until the answer with that id, and repeats: the simplest
client there is, so it can only keep one call in flight.

  plain_client.py SPEC_JSON

SPEC_JSON as py_sdk_client.py's (every phase must have "inflight": 1; the
"server" env is added to this process's environment). Spawns the server with
`subprocess.Popen`, initializes, makes `warmup` calls, then times each phase's
calls and prints one JSON object on stdout before closing the server's stdin:

  {"phases": [{"inflight": 1, "lat_us": [per-call microseconds], "wall_us": W}, ...]}
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any


def main() -> int:
    spec = json.loads(sys.argv[1])
    srv = spec["server"]
    if any(p["inflight"] != 1 for p in spec["phases"]):
        print("plain_client: only sequential calls (inflight 1)", file=sys.stderr)
        return 1
    env = dict(os.environ)
    env.update(srv.get("env") or {})
    with open(srv["stderr"], "a") as errlog:
        proc = subprocess.Popen(
            [srv["command"], *srv["args"]],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errlog,
            cwd=srv.get("cwd"),
            env=env,
        )
    assert proc.stdin is not None and proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout
    next_id = 0

    def request(method: str, params: dict[str, Any]) -> Any:
        nonlocal next_id
        next_id += 1
        stdin.write(json.dumps({"jsonrpc": "2.0", "id": next_id, "method": method, "params": params}).encode() + b"\n")
        stdin.flush()
        while True:
            line = stdout.readline()
            if not line:
                raise RuntimeError(f"the server closed its output before answering {method} #{next_id}")
            msg = json.loads(line)
            if msg.get("id") == next_id and "method" not in msg:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    try:
        request(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "clients-bench-plain", "version": "0"},
            },
        )
        stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        stdin.flush()
        params: dict[str, Any] = {"name": spec["tool"], "arguments": spec["arguments"]}
        if spec.get("meta") is not None:
            params["_meta"] = spec["meta"]

        def call() -> float:
            t = time.perf_counter_ns()
            r = request("tools/call", params)
            d = time.perf_counter_ns() - t
            if r.get("isError"):
                raise RuntimeError(f"{spec['tool']} failed: {r.get('content')}")
            return d / 1000.0

        for _ in range(spec["warmup"]):
            call()
        phases = []
        for p in spec["phases"]:
            t0 = time.perf_counter_ns()
            lat = [call() for _ in range(p["calls"])]
            wall = (time.perf_counter_ns() - t0) / 1000.0
            phases.append({"inflight": 1, "lat_us": [round(x, 1) for x in lat], "wall_us": round(wall, 1)})
        sys.stdout.write(json.dumps({"phases": phases}) + "\n")
        sys.stdout.flush()
    except Exception as err:  # noqa: BLE001 - reported, then the server is stopped
        print(f"plain_client: {type(err).__name__}: {err}", file=sys.stderr)
        proc.kill()
        proc.wait()
        return 1
    stdin.close()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
