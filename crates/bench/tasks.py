#!/usr/bin/env python3
"""A long tool run as a task against the same tool called directly (#53),
through a serving host as the Python SDK 2.3 meets them.

    tests/peers/.venv/bin/python crates/bench/tasks.py BINARY CONFORMANCE_WASM [--runs N]

`toolhost serve --http` with the conformance plugin only (optimized code,
warm). Per revision (`legacy`: 2025-11-25, `auto`: 2026-07-28), one client
in one session makes N (default 40) of each after 5 warm-up, interleaved:
`tools/call long_quest {"steps": 1}` (one 100 ms step: the baseline), the
same as a task polled with `tasks/get` every 5 ms until it completes (the
host's own overhead: create, run, record, read), and on 2025-11-25 the
same as a task fetched with one blocking `tasks/result`. Prints a Markdown
table: p50 and p90 from sending the call to holding the result, in ms, and
the p50 ratio to the direct call. (An SDK client that honours the task's
`pollInterval`, 250 ms, sees the result up to that much later.)
"""

import asyncio
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../tests/peers"))

import mcp_types as types  # noqa: E402
import py_tasks  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from offers import serving  # noqa: E402

ARGS = {"steps": 1}


async def as_task(client, blocking):
    session = client.session
    modern = py_tasks.is_modern(session)
    if modern:
        made = await py_tasks.modern_create(session, "long_quest", ARGS)
    else:
        made = await py_tasks.legacy_create(session, "long_quest", ARGS, None, 30.0)
    task_id, _ = py_tasks.handle_id(made["created"])
    if blocking:
        request = types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=task_id))
        return await session.send_request(request, types.CallToolResult)
    while True:
        state = await py_tasks.get_task(session, modern, task_id)
        if state.get("status") in py_tasks.TERMINAL:
            if state["status"] != "completed":
                raise SystemExit(f"task ended {state}")
            return state
        await asyncio.sleep(0.005)


async def measure(url, mode, runs):
    requests = {
        "tools/call long_quest (direct)": lambda c: c.call_tool("long_quest", ARGS),
        "as a task, tasks/get every 5 ms": lambda c: as_task(c, False),
    }
    ext = py_tasks.TasksExtension(30.0)
    # The direct call from a client that declares no tasks (one that does
    # gets a task for a long tool, and its SDK polls it).
    async with (
        Client(streamable_http_client(url), mode=mode, cache=None) as plain,
        Client(streamable_http_client(url), mode=mode, cache=None, extensions=[ext]) as client,
    ):
        await plain.list_tools()
        await client.list_tools()
        if not py_tasks.is_modern(client.session):
            requests["as a task, one tasks/result"] = lambda c: as_task(c, True)
        times = {k: [] for k in requests}
        for i in range(5 + runs):
            for name, request in requests.items():
                t = time.perf_counter()
                result = await request(plain if "direct" in name else client)
                took = (time.perf_counter() - t) * 1e3
                if getattr(result, "is_error", False):
                    raise SystemExit(f"{name} failed: {result}")
                if i >= 5:
                    times[name].append(took)
        protocol = client.protocol_version
    return protocol, times


def main():
    args = sys.argv[1:]
    runs = 40
    if "--runs" in args:
        i = args.index("--runs")
        runs = int(args[i + 1])
        del args[i : i + 2]
    binary, wasm = (os.path.abspath(a) for a in args)
    config = "limits:\n  compile: optimized\n  tasks_per_agent: 64\n  task_results_per_agent: 1000\n"
    with serving(binary, wasm, config) as url:
        print("| Client | Request | p50 ms | p90 ms | p50 / direct call |")
        print("|---|---|---|---|---|")
        for mode in ["legacy", "auto"]:
            protocol, times = asyncio.run(measure(url, mode, runs))
            base = statistics.median(times["tools/call long_quest (direct)"])
            for name, t in times.items():
                p50 = statistics.median(t)
                p90 = statistics.quantiles(t, n=10)[-1]
                print(f"| Python SDK, {protocol} | {name} | {p50:.2f} | {p90:.2f} | {p50 / base:.3f} |")


if __name__ == "__main__":
    main()
