#!/usr/bin/env python3
"""A plugin's resource read and prompt get against its tool call, and a
question to the client in each protocol revision (#53), through a serving
host as a client meets them.

    tests/peers/.venv/bin/python crates/bench/offers.py BINARY CONFORMANCE_WASM [--runs N]

`toolhost serve --http` with the conformance plugin only (optimized code,
warm). One Python SDK 2.3 client per revision (`legacy`: 2025-11-25,
`auto`: 2026-07-28), each in its own session, makes N (default 300) of
each request after 30 warm-up, interleaved round by round: `tools/call
test_simple_text` (the baseline), `resources/read test://static-text`,
`resources/read test://template/7/data`, `prompts/get
test_prompt_with_arguments`, `completion/complete`, and `tools/call
test_elicitation` answered at once by the client's callback (2025-11-25:
a request of the server's mid-call; 2026-07-28: an `input_required` result
and the call sent again). Prints a Markdown table: p50 and p90 round trip
in ms and the p50 ratio to the tool call of the same client.
"""

import asyncio
import contextlib
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


async def measure(url, mode, runs):
    async def elicit(context, params):
        return types.ElicitResult(action="accept", content={"username": "ann", "email": "a@example.com"})

    requests = {
        "tools/call test_simple_text": lambda c: c.call_tool("test_simple_text", {}),
        "resources/read static": lambda c: c.read_resource("test://static-text"),
        "resources/read template": lambda c: c.read_resource("test://template/7/data"),
        "prompts/get with arguments": lambda c: c.get_prompt(
            "test_prompt_with_arguments", {"arg1": "hello", "arg2": "world"}
        ),
        "completion/complete": lambda c: c.complete(
            types.PromptReference(type="ref/prompt", name="test_prompt_with_arguments"), {"name": "arg1", "value": "te"}
        ),
        "tools/call asking the user": lambda c: c.call_tool("test_elicitation", {"message": "who?"}),
    }
    times = {k: [] for k in requests}
    async with Client(streamable_http_client(url), mode=mode, cache=None, elicitation_callback=elicit) as client:
        for i in range(30 + runs):
            for name, request in requests.items():
                t = time.perf_counter()
                result = await request(client)
                took = (time.perf_counter() - t) * 1e3
                if getattr(result, "is_error", False):
                    raise SystemExit(f"{name} failed: {result}")
                if i >= 30:
                    times[name].append(took)
        protocol = client.protocol_version
    return protocol, times


@contextlib.contextmanager
def serving(binary, wasm, config="limits:\n  compile: optimized\n"):
    """`toolhost serve --http` with only the plugin `wasm`, in a throwaway
    directory with `config` as its toolhost.yaml: its `/mcp` URL."""
    with tempfile.TemporaryDirectory() as d:
        port = free_port()
        with open(os.path.join(d, "toolhost.yaml"), "w") as f:
            f.write(config)
        env = dict(os.environ, TOOLHOST_STATE_DIR=os.path.join(d, "state"), TOOLHOST_CACHE_DIR=os.path.join(d, "cache"))
        host = subprocess.Popen(
            [binary, "serve", "--http", f"127.0.0.1:{port}", "--no-builtins", "--allow-unsigned", "--plugin", wasm],
            cwd=d,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        try:
            host.stdout.readline()
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            host.terminate()
            host.wait()


def main():
    args = sys.argv[1:]
    runs = 300
    if "--runs" in args:
        i = args.index("--runs")
        runs = int(args[i + 1])
        del args[i : i + 2]
    binary, wasm = (os.path.abspath(a) for a in args)
    with serving(binary, wasm) as url:
        print("| Client | Request | p50 ms | p90 ms | p50 / tool call |")
        print("|---|---|---|---|---|")
        for mode in ["legacy", "auto"]:
            protocol, times = asyncio.run(measure(url, mode, runs))
            base = statistics.median(times["tools/call test_simple_text"])
            for name, t in times.items():
                p50 = statistics.median(t)
                p90 = statistics.quantiles(t, n=10)[-1]
                print(f"| Python SDK, {protocol} | {name} | {p50:.2f} | {p90:.2f} | {p50 / base:.2f} |")


if __name__ == "__main__":
    main()
