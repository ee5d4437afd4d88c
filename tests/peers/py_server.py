#!/usr/bin/env python3
"""A small MCP server written with the official Python `mcp` package (2.x).

toolhost's tests use it as a third-party external server. It serves over stdio
by default, or over streamable HTTP on 127.0.0.1 with `--http PORT` (endpoint
`/mcp`).

Tools:
  echo {text}      returns its text (tool _meta declares estimated/max duration)
  add {a, b}       returns a + b
  slow {ms}        sleeps ms milliseconds, then returns "slept N ms"
  steps {n}        reports progress 1..n of n at once, then returns "n steps"
  fail {}          raises: the result has isError: true
  crash {}         exits the process at once with status 3 (os._exit)

Test hooks (environment):
  PY_PEER_PIDFILE  write the process id there at start (tests kill it)
  PY_PEER_EVENTS   append one line per event there: "started slow" when a
                   `slow` call begins, "cancelled slow" when one is cancelled
                   (notifications/cancelled), "token" per OAuth token issued

HTTP auth (with --http): `--token T` requires `Authorization: Bearer T`;
`--oauth CLIENT_ID:SECRET` adds an OAuth 2.1 client-credentials token
endpoint at /token (HTTP Basic client auth) issuing tokens that live
`--token-ttl` seconds, and requires a live one on /mcp.

Run it with tests/peers/.venv/bin/python (scripts/install-peers makes it).
Logs go to stderr; on stdio, stdout carries protocol messages only.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

def event(line: str) -> None:
    path = os.environ.get("PY_PEER_EVENTS")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")


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
    event("started slow")
    try:
        await asyncio.sleep(ms / 1000)
    except asyncio.CancelledError:
        event("cancelled slow")
        raise
    return f"slept {ms} ms"


@server.tool(description="Reports progress `n` times at once (1 of n, ..., n of n), then answers.")
async def steps(n: int, ctx: Context) -> str:
    for i in range(1, n + 1):
        await ctx.report_progress(i, n, f"step {i}")
    return f"{n} steps"


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
    parser.add_argument("--token", help="with --http: require this bearer token")
    parser.add_argument("--oauth", metavar="ID:SECRET", help="with --http: OAuth client credentials at /token")
    parser.add_argument("--token-ttl", type=int, default=3600, help="lifetime of OAuth tokens, seconds")
    args = parser.parse_args()
    pidfile = os.environ.get("PY_PEER_PIDFILE")
    if pidfile:
        with open(pidfile, "w", encoding="utf-8") as f:
            f.write(str(os.getpid()))
    if args.http is None:
        server.run("stdio")
    elif args.token is None and args.oauth is None:
        server.run("streamable-http", host="127.0.0.1", port=args.http)
    else:
        import uvicorn

        uvicorn.run(guarded(server.streamable_http_app(), args), host="127.0.0.1", port=args.http, log_level="warning")


def guarded(app, args):
    """Wraps the MCP app: a token endpoint (OAuth) and a bearer check on everything else."""
    import base64
    import json
    import secrets
    import time
    import urllib.parse

    issued: dict[str, float] = {}

    async def reply(send, status: int, body: dict, headers=()) -> None:
        data = json.dumps(body).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), *headers]})
        await send({"type": "http.response.body", "body": data})

    async def asgi(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        if scope["path"] == "/token" and args.oauth:
            body = b""
            while True:
                m = await receive()
                body += m.get("body", b"")
                if not m.get("more_body"):
                    break
            form = urllib.parse.parse_qs(body.decode())
            want = "Basic " + base64.b64encode(args.oauth.encode()).decode()
            if headers.get("authorization") != want:
                return await reply(send, 401, {"error": "invalid_client"})
            if form.get("grant_type") != ["client_credentials"]:
                return await reply(send, 400, {"error": "unsupported_grant_type"})
            token = secrets.token_hex(16)
            issued[token] = time.time() + args.token_ttl
            event("token")
            return await reply(send, 200, {"access_token": token, "token_type": "Bearer",
                                           "expires_in": args.token_ttl})
        auth = headers.get("authorization", "")
        given = auth[7:] if auth.lower().startswith("bearer ") else None
        ok = given is not None and (given == args.token or issued.get(given, 0) > time.time())
        if not ok:
            return await reply(send, 401, {"error": "invalid_token"}, [(b"www-authenticate", b"Bearer")])
        return await app(scope, receive, send)

    return asgi


if __name__ == "__main__":
    main()
