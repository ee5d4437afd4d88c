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
  nag {}           asks the user again and again (a request mid-call; on
                   2025-11-25 only), at most 1,000 times, until refused
  confirm {question}  asks the user (elicitation, form {ok: bool}) and
                   answers "confirmed", "refused" or "declined"; a request
                   of the server's mid-call on 2025-11-25, an
                   `input_required` result on 2026-07-28

Test hooks (environment):
  PY_PEER_PIDFILE  write the process id there at start (tests kill it)
  PY_PEER_EVENTS   append one line per event there: "started slow" when a
                   `slow` call begins, "cancelled slow" when one is cancelled
                   (notifications/cancelled), "token" per OAuth token issued,
                   "trace META HEADER" per tools/call: the W3C traceparent
                   in its params._meta and in its HTTP header ("-" if none)

`--modern-only` (with --http): `initialize` is refused, as by a server
that speaks only MCP 2026-07-28 (`server/discover`, per-request metadata);
`--legacy-only`: `server/discover` is refused, as by a 2025-11-25 server.
With either and PY_PEER_EVENTS set, each JSON-RPC request is recorded as
"rpc METHOD VERSION" (VERSION from its `_meta`, "-" without).

HTTP auth (with --http): `--token T` requires `Authorization: Bearer T`;
`--oauth CLIENT_ID:SECRET` adds an OAuth 2.1 client-credentials token
endpoint at /token (HTTP Basic client auth) issuing tokens that live
`--token-ttl` seconds, and requires a live one on /mcp.

Tracing: `--otlp URL` (a collector's base URL, e.g. http://127.0.0.1:4318)
exports, per tools/call, one span `upstream TOOL` (kind SERVER, service.name
`py-peer`, attribute mcp.tool.name) to URL/v1/traces as OTLP protobuf, at
once (before the call is answered). It is the SDK's own span: mcp's OpenTelemetryMiddleware opens a
SERVER span per request, parented on the W3C context in params._meta
(SEP-414), else on the ambient context, which with --otlp and --http is the
`traceparent`/`tracestate` HTTP header (the SDK reads no header itself);
this script renames it, adds mcp.tool.name, and exports only tools/call ones.
A parent whose traceparent says not sampled (flags 00) gets no span (the
SDK's default parent-based sampler). A receiver that is down delays each
call by the export's retries, at most 5 s.

Run it with tests/peers/.venv/bin/python (scripts/install-peers makes it).
Logs go to stderr; on stdio, stdout carries protocol messages only.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from typing import Annotated

from pydantic import BaseModel

from mcp.server.elicitation import AcceptedElicitation, ElicitationResult
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.resolve import Elicit, Resolve
from mcp.server.mcpserver.exceptions import ToolError

def event(line: str) -> None:
    path = os.environ.get("PY_PEER_EVENTS")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")


async def trace_event(ctx, call_next):
    """Middleware: per tools/call, the "trace META HEADER" event."""
    if ctx.method == "tools/call" and os.environ.get("PY_PEER_EVENTS"):
        headers = getattr(ctx.request, "headers", None) or {}
        event(f"trace {(ctx.meta or {}).get('traceparent') or '-'} {headers.get('traceparent') or '-'}")
    return await call_next(ctx)


server = MCPServer(name="toolhost-py-peer", version="1.0.0", log_level="WARNING", middleware=[trace_event])


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


class Confirmation(BaseModel):
    ok: bool


def ask_confirmation(question: str) -> Elicit[Confirmation]:
    return Elicit(question, Confirmation)


@server.tool(description="Asks the user to confirm `question` (elicitation), then says what they answered.")
def confirm(
    question: str,
    answer: Annotated[ElicitationResult[Confirmation], Resolve(ask_confirmation)],
) -> str:
    if isinstance(answer, AcceptedElicitation):
        return "confirmed" if answer.data.ok else "refused"
    return "declined"


@server.tool(description="Asks the user over and over (2025-11-25 only): a hostile server.")
async def nag(ctx: Context) -> str:
    for i in range(1000):
        try:
            await ctx.elicit(f"question {i}", Confirmation)
        except Exception as e:  # the client refused: say how far it got
            return f"stopped after {i} questions: {e}"
    return "asked 1000 questions"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on 127.0.0.1:PORT/mcp")
    parser.add_argument("--token", help="with --http: require this bearer token")
    parser.add_argument("--oauth", metavar="ID:SECRET", help="with --http: OAuth client credentials at /token")
    parser.add_argument("--token-ttl", type=int, default=3600, help="lifetime of OAuth tokens, seconds")
    parser.add_argument("--modern-only", action="store_true", help="with --http: refuse `initialize` (MCP 2026-07-28 only)")
    parser.add_argument("--legacy-only", action="store_true", help="with --http: refuse `server/discover` (2025-11-25)")
    parser.add_argument("--otlp", metavar="URL", help="export a span per tools/call to URL/v1/traces (OTLP/HTTP)")
    args = parser.parse_args()
    pidfile = os.environ.get("PY_PEER_PIDFILE")
    if pidfile:
        with open(pidfile, "w", encoding="utf-8") as f:
            f.write(str(os.getpid()))
    if args.otlp:
        export_spans(args.otlp)
    if args.http is None:
        server.run("stdio")
    elif args.modern_only or args.legacy_only or args.token is not None or args.oauth is not None or args.otlp:
        import uvicorn

        app = server.streamable_http_app()
        if args.modern_only or args.legacy_only:
            app = refusing(app, "initialize" if args.modern_only else "server/discover")
        if args.token is not None or args.oauth is not None:
            app = guarded(app, args)
        if args.otlp:
            app = header_context(app)
        uvicorn.run(app, host="127.0.0.1", port=args.http, log_level="warning")
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.http)


def export_spans(url: str) -> None:
    """Installs an OpenTelemetry SDK that sends the SDK's tools/call spans to URL/v1/traces."""
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    class ToolCalls(SimpleSpanProcessor):
        """Exports each tools/call span as it ends, as `upstream TOOL`; drops the others."""

        def on_start(self, span, parent_context=None) -> None:
            if span.attributes.get("mcp.method.name") == "tools/call":
                tool = span.attributes.get("gen_ai.tool.name", "")
                span.update_name(f"upstream {tool}")
                span.set_attribute("mcp.tool.name", tool)

        def on_end(self, span) -> None:
            if span.attributes.get("mcp.method.name") == "tools/call":
                super().on_end(span)

    provider = TracerProvider(resource=Resource.create({"service.name": "py-peer"}))
    exporter = OTLPSpanExporter(endpoint=url.rstrip("/") + "/v1/traces", timeout=5)
    provider.add_span_processor(ToolCalls(exporter))
    trace.set_tracer_provider(provider)


def header_context(app):
    """Wraps the MCP app: each request runs in the W3C trace context of its HTTP headers.

    What an OpenTelemetry ASGI instrumentation does, less its own span: the SDK
    hands the request's contextvars on to the handler, whose span falls back
    to this parent when params._meta carries no traceparent.
    """
    from opentelemetry import context, propagate

    async def asgi(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        carrier = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        token = context.attach(propagate.extract(carrier))
        try:
            return await app(scope, receive, send)
        finally:
            context.detach(token)

    return asgi


async def read_body(receive) -> bytes:
    """An ASGI request's whole body."""
    body = b""
    while True:
        m = await receive()
        body += m.get("body", b"")
        if not m.get("more_body"):
            return body


def refusing(app, refused: str):
    """Wraps the MCP app: requests for `refused` are refused; each request is recorded."""
    import json

    async def asgi(scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST":
            return await app(scope, receive, send)
        body = await read_body(receive)
        try:
            message = json.loads(body)
        except ValueError:
            message = {}
        method = message.get("method") if isinstance(message, dict) else None
        if method is not None and "id" in message:
            version = ((message.get("params") or {}).get("_meta") or {}).get("io.modelcontextprotocol/protocolVersion", "-")
            event(f"rpc {method} {version}")
        if method == refused:
            event(f"refused {method}")
            error = {"jsonrpc": "2.0", "id": message.get("id"),
                     "error": {"code": -32601, "message": f"Method not found: {method}"}}
            data = json.dumps(error).encode()
            await send({"type": "http.response.start", "status": 400,
                        "headers": [(b"content-type", b"application/json")]})
            return await send({"type": "http.response.body", "body": data})
        sent = False

        async def replay():
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        return await app(scope, replay, send)

    return asgi


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
            body = await read_body(receive)
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
