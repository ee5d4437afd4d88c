#!/usr/bin/env python3
"""Call one tool over and over on ONE session, with the official Python `mcp` package (2.x).

  py_loop.py --url URL [--mode legacy|auto] [--header 'Name: value'] [--tool roll]
             [--args JSON] [--every 0.1] --until FILE [--max-seconds 120] [--trace]

Connects once with the SDK's streamable HTTP client (`--mode legacy`: the
`initialize` handshake only; `auto`, the SDK's default: a `server/discover`
probe, then `initialize` on a pre-2026 server), then calls --tool with --args
(default {"expression": "1d20"}) every --every seconds until FILE exists
(checked before each call, and every 50 ms of the pause between calls) or
--max-seconds have passed. It never reconnects
nor initializes again: after an error it goes on with the same client, as a
default SDK client would, so whatever the SDK does on its own (the GET
stream's reconnection, say) is what happens.

stdout, one JSON object a line, flushed at once:
  {"ready": true, "session": <Mcp-Session-Id the server gave, or null>,
   "protocol": <negotiated protocol version>}
  {"i": N, "start": <unix seconds>, "end": <unix seconds>, "ok": BOOL,
   "error": <text or null>}                                         (each call)
  {"done": true, "calls": N, "failed": N, "reason": "until"|"max-seconds"}

A call fails ("ok": false) when it raised (the SDK's timeout is 30 s a call,
with a 35 s guard around it), answered a JSON-RPC error ("error" is
"CODE message") or a result with isError: true ("error" is its text).
When connecting fails: {"ready": false, "error": ...} and exit status 1;
otherwise exit status 0, also when the session is broken (teardown is given
5 s, then the process exits regardless).

The SDK's own behaviour when the server goes away: a POST that cannot
connect (httpx ConnectError) is not turned into an error for that request;
it escapes the transport's task group, which tears the whole client down
(the `async with Client(...)` block is cancelled). So the client lives in a
task of its own (`hold`) and the loop goes on calling the same, now closed,
Client: each later call fails at once ("RuntimeError: Client must be used
within an async context manager"). When that happens, stderr gets
{"sdk_closed": <why>, "t": <unix seconds>}. An HTTP error status (503 while
the host stops, 404 for an unknown session) is only that call's error.

--trace writes each HTTP request and response to stderr as JSON lines
({"http": "request", "method", "url", "headers": {mcp-session-id,
last-event-id, mcp-protocol-version}}; {"http": "response", "method",
"status"}), to see what the SDK does once the server is gone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
import time
from typing import Any, NoReturn

from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

CALL_TIMEOUT = 30.0
TEARDOWN_SECONDS = 5.0


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True, help="streamable HTTP endpoint, e.g. http://127.0.0.1:8722/mcp/bartok")
    parser.add_argument("--mode", choices=["auto", "legacy"], default="auto", help="protocol negotiation")
    parser.add_argument("--header", action="append", default=[], help="'Name: value' (repeatable)")
    parser.add_argument("--tool", default="roll", help="the tool to call")
    parser.add_argument("--args", default='{"expression":"1d20"}', metavar="JSON", help="its arguments")
    parser.add_argument("--every", type=float, default=0.1, metavar="S", help="seconds between calls")
    parser.add_argument("--until", required=True, metavar="FILE", help="stop once this file exists")
    parser.add_argument("--max-seconds", type=float, default=120.0, metavar="S", help="stop after this long")
    parser.add_argument("--trace", action="store_true", help="log HTTP traffic to stderr")
    return parser.parse_args(argv)


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def note(obj: dict[str, Any]) -> None:
    print(json.dumps({"t": time.time(), **obj}), file=sys.stderr, flush=True)


def describe(err: BaseException) -> str:
    if isinstance(err, MCPError):
        return f"{err.error.code} {err.error.message}"
    message = f"{type(err).__name__}: {err}"
    if isinstance(err, BaseExceptionGroup):
        message += " [" + "; ".join(describe(e) for e in err.exceptions) + "]"
    return message


def result_error(result: Any) -> str | None:
    """The text of an isError result, else None."""
    if not getattr(result, "is_error", False):
        return None
    texts = [getattr(block, "text", None) for block in (result.content or [])]
    return " ".join(t for t in texts if t) or "isError: true (no text)"


class Holder:
    """Owns the SDK client in a task of its own, from connecting to teardown.

    The SDK's task groups cancel the task that entered them when the transport
    fails; that must not be the loop's task.
    """

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.client: Client | None = None
        self.session: str | None = None
        self.error: BaseException | None = None
        self.connected = asyncio.Event()
        self.release = asyncio.Event()
        self.closing = False

    async def on_request(self, request: Any) -> None:
        if self.args.trace:
            keep = ("mcp-session-id", "last-event-id", "mcp-protocol-version")
            picked = {k: v for k, v in request.headers.items() if k.lower() in keep}
            note({"http": "request", "method": request.method, "url": str(request.url), "headers": picked})

    async def on_response(self, response: Any) -> None:
        sid = response.headers.get("mcp-session-id")
        if sid and self.session is None:
            self.session = sid
        if self.args.trace:
            note({"http": "response", "method": response.request.method, "status": response.status_code})

    async def hold(self) -> None:
        headers = {}
        for header in self.args.header:
            name, _, value = header.partition(":")
            headers[name.strip()] = value.strip()
        try:
            async with create_mcp_http_client(headers=headers) as http:
                http.event_hooks = {"request": [self.on_request], "response": [self.on_response]}
                transport = streamable_http_client(self.args.url, http_client=http)
                client = Client(transport, mode=self.args.mode, read_timeout_seconds=CALL_TIMEOUT, cache=None)
                async with client:
                    self.client = client
                    self.connected.set()
                    await self.release.wait()
        except BaseException as err:  # noqa: BLE001 - report anything, including ExceptionGroups
            self.error = err
            if self.closing:
                note({"teardown": describe(err)})
            elif self.client is not None:
                note({"sdk_closed": describe(err)})
        finally:
            self.connected.set()


async def main_async(args: argparse.Namespace) -> None:
    arguments = json.loads(args.args)
    holder = Holder(args)
    task = asyncio.create_task(holder.hold())
    try:
        await asyncio.wait_for(holder.connected.wait(), CALL_TIMEOUT + 5)
    except asyncio.TimeoutError:
        holder.error = TimeoutError(f"not connected within {CALL_TIMEOUT + 5:g} s")
    client = holder.client
    if client is None:
        emit({"ready": False, "error": describe(holder.error or RuntimeError("not connected"))})
        finish(1)
    emit({"ready": True, "session": holder.session, "protocol": client.protocol_version})

    deadline = time.monotonic() + args.max_seconds
    calls = failed = 0
    reason = "max-seconds"
    while True:
        if os.path.exists(args.until):
            reason = "until"
            break
        if time.monotonic() >= deadline:
            break
        start = time.time()
        error: str | None
        try:
            async with asyncio.timeout(CALL_TIMEOUT + 5):
                result = await client.call_tool(args.tool, arguments, read_timeout_seconds=CALL_TIMEOUT)
            error = result_error(result)
        except TimeoutError:
            error = f"no answer within {CALL_TIMEOUT + 5:g} s"
        except Exception as err:  # noqa: BLE001 - every failure is a line
            error = describe(err)
        end = time.time()
        emit({"i": calls, "start": start, "end": end, "ok": error is None, "error": error})
        calls += 1
        failed += error is not None
        # The pause, cut short once FILE exists.
        pause_end = time.monotonic() + args.every
        while time.monotonic() < pause_end and not os.path.exists(args.until):
            await asyncio.sleep(min(0.05, max(0.0, pause_end - time.monotonic())))
    emit({"done": True, "calls": calls, "failed": failed, "reason": reason})

    # Close the client (DELETE of the session, when it is still alive), for
    # TEARDOWN_SECONDS at most; the timer ends the process should the event
    # loop itself be stuck.
    threading.Timer(TEARDOWN_SECONDS + 1, os._exit, [0]).start()
    holder.closing = True
    holder.release.set()
    try:
        await asyncio.wait_for(asyncio.shield(task), TEARDOWN_SECONDS)
    except BaseException as err:  # noqa: BLE001
        note({"teardown": describe(err)})
    finish(0)


def finish(status: int) -> NoReturn:
    """Exit now: not through asyncio.run's shutdown, which waits for every task."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def main() -> None:
    args = parse_args(sys.argv[1:])
    try:
        asyncio.run(main_async(args))
    except BaseException as err:  # noqa: BLE001
        note({"py_loop": describe(err)})
    finish(1)


if __name__ == "__main__":
    main()
