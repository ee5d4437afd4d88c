#!/usr/bin/env python3
"""The clients bench's Python SDK client (benches/clients.rs): the official
`mcp` package's `stdio_client` and `ClientSession`, as an application uses them.

  py_sdk_client.py SPEC_JSON

SPEC_JSON: {"server": {"command", "args", "env", "cwd", "stderr"}, "tool",
"arguments", "meta" (the tools/call `_meta`, or null), "warmup",
"phases": [{"inflight": K, "calls": N}, ...]}.

Spawns the server through the SDK's stdio transport, initializes, lists the
tools, makes `warmup` sequential calls (and `warmup` more at the largest
`inflight`), then for each phase times N calls with K in flight (K = 1: one
after another; K > 1: N tasks through a semaphore of K, gathered). Prints one
JSON object on stdout before closing the session:

  {"phases": [{"inflight": K, "lat_us": [per-call microseconds], "wall_us": W}, ...]}

Spawn, initialize and shutdown are outside every timing. Any failure exits 1
with the reason on stderr.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from mcp import ClientSession, StdioServerParameters, stdio_client


async def run(spec: dict[str, Any]) -> dict[str, Any]:
    srv = spec["server"]
    tool: str = spec["tool"]
    arguments: dict[str, Any] = spec["arguments"]
    meta = spec.get("meta")
    params = StdioServerParameters(
        command=srv["command"], args=srv["args"], env=srv.get("env") or None, cwd=srv.get("cwd")
    )

    with open(srv["stderr"], "a") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                await session.list_tools()

                async def call() -> float:
                    t = time.perf_counter_ns()
                    r = await session.call_tool(tool, arguments, meta=meta)
                    d = time.perf_counter_ns() - t
                    if r.is_error:
                        raise RuntimeError(f"{tool} failed: {r.content}")
                    return d / 1000.0

                async def phase(inflight: int, calls: int) -> dict[str, Any]:
                    t0 = time.perf_counter_ns()
                    if inflight <= 1:
                        lat = [await call() for _ in range(calls)]
                    else:
                        sem = asyncio.Semaphore(inflight)

                        async def one() -> float:
                            async with sem:
                                return await call()

                        lat = list(await asyncio.gather(*(one() for _ in range(calls))))
                    wall = (time.perf_counter_ns() - t0) / 1000.0
                    return {"inflight": inflight, "lat_us": [round(x, 1) for x in lat], "wall_us": round(wall, 1)}

                warmup = spec["warmup"]
                await phase(1, warmup)
                most = max((p["inflight"] for p in spec["phases"]), default=1)
                if most > 1:
                    await phase(most, warmup)
                out = {"phases": [await phase(p["inflight"], p["calls"]) for p in spec["phases"]]}
                # Printed before the session closes, so shutdown is not on the clock.
                sys.stdout.write(json.dumps(out) + "\n")
                sys.stdout.flush()
                return out


def leaves(err: BaseException) -> list[str]:
    """The exceptions an (anyio) exception group wraps, however deep, as text."""
    if isinstance(err, BaseExceptionGroup):
        return [m for e in err.exceptions for m in leaves(e)]
    return [f"{type(err).__name__}: {err}"]


def main() -> int:
    try:
        asyncio.run(run(json.loads(sys.argv[1])))
    except BaseException as err:  # noqa: BLE001 - report anything, including ExceptionGroups
        if isinstance(err, KeyboardInterrupt):
            raise
        print(f"py_sdk_client: {'; '.join(leaves(err))}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
