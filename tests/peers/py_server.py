#!/usr/bin/env python3
"""A small MCP server written with the official Python `mcp` package (2.x).

toolhost's tests use it as a third-party external server. It serves over stdio
by default, or over streamable HTTP on 127.0.0.1 with `--http PORT` (endpoint
`/mcp`).

Tools:
  echo {text}      returns its text (tool _meta declares estimated/max duration)
  add {a, b}       returns a + b
  slow {ms}        sleeps ms milliseconds, then returns "slept N ms"
  fail {}          raises: the result has isError: true
  crash {}         exits the process at once with status 3 (os._exit)

Run it with tests/peers/.venv/bin/python (scripts/install-peers makes it).
Logs go to stderr; on stdio, stdout carries protocol messages only.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer(name="toolhost-py-peer", version="1.0.0", log_level="WARNING")


@server.tool(
    description="Returns its text argument unchanged.",
    meta={"estimated_duration_ms": 5, "max_duration_ms": 50},
)
def echo(text: str) -> str:
    return text


@server.tool(description="Adds two numbers.")
def add(a: int | float, b: int | float) -> int | float:
    return a + b


@server.tool(description="Sleeps `ms` milliseconds, then answers. For timeout and cancellation tests.")
async def slow(ms: int) -> str:
    await asyncio.sleep(ms / 1000)
    return f"slept {ms} ms"


@server.tool(description="Always fails: the result is an error (isError: true).")
def fail() -> str:
    # ToolError: the SDK turns it into an isError result carrying this message.
    raise ToolError("the fail tool failed on purpose")


@server.tool(description="Exits the server process at once (status 3). For crash tests.")
def crash() -> str:
    sys.stderr.flush()
    os._exit(3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT/mcp")
    args = parser.parse_args()
    if args.http is not None:
        server.run("streamable-http", host="127.0.0.1", port=args.http)
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
