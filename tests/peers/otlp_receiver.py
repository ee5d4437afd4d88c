#!/usr/bin/env python3
"""A scripted OpenTelemetry Collector: an OTLP/HTTP trace receiver.

Serves on 127.0.0.1 as the OTLP/HTTP specification has a server behave
(https://opentelemetry.io/docs/specs/otlp/#otlphttp), and records what it
was sent, for tests of toolhost's trace export:

  POST /v1/traces  an ExportTraceServiceRequest, as binary protobuf
                   (Content-Type: application/x-protobuf) or OTLP JSON
                   (application/json: proto3 JSON with hex trace/span ids),
                   optionally `Content-Encoding: gzip`
    200  decoded: an empty ExportTraceServiceResponse, in the request's
         content type
    400  an undecodable body (or an unknown Content-Encoding)
    413  a body past 20 MiB (before or after gunzip)
    415  any other content type
  404 on any other path, 405 on /v1/traces with another method.
  Every 4xx body is a google.rpc.Status ({"message": ...} in JSON).

  otlp_receiver.py [--port PORT] --out FILE [--requests FILE]

--port 0 (the default) picks a free port; once bound it prints
`listening PORT` on stdout. --out gets one JSON line per span received,
written before the request is answered:

  {"trace_id": 32 hex, "span_id": 16 hex, "parent_span_id": 16 hex or "",
   "trace_state": W3C tracestate or "", "name": ..., "kind": "SPAN_KIND_SERVER",
   "start": ns, "end": ns, "status": "STATUS_CODE_UNSET",
   "attributes": {key: str/int/float/bool, arrays as lists, kvlists as
   objects, bytes as hex},
   "service": resource attribute service.name or null,
   "scope": instrumentation scope name,
   "headers": {the request's lower-cased headers that start with "x-" or
               are "authorization"}}

and one {"violation": "..."} line per breach of OTLP it notices: a trace id
not 16 bytes or all zero, a span id not 8 bytes or zero, a parent span id
present but not 8 bytes or zero, a start or end time of 0, end < start, an
empty name, a request with no span; in OTLP JSON, an enum given by name, a
field name not in lowerCamelCase; and a body that could not be decoded.
--requests gets one JSON line per request, whatever its method:
{"method", "path", "content_type", "content_encoding", "status", "spans"}.

Needs opentelemetry-proto (and protobuf); run it with tests/peers/.venv/bin/python.
"""

from __future__ import annotations

import argparse
import base64
import json
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

LIMIT = 20 * 1024 * 1024  # the body limit the spec recommends
PROTOBUF, JSON = "application/x-protobuf", "application/json"
ID_FIELDS = {"traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id"}
ENUM_FIELDS = {"kind", "code"}  # Span.kind, Status.code

lock = threading.Lock()
args: argparse.Namespace


class BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def append(path: str | None, lines: list[dict]) -> None:
    if path and lines:
        with lock, open(path, "a", encoding="utf-8") as f:
            f.write("".join(json.dumps(line) + "\n" for line in lines))


def value(v) -> object:
    """An AnyValue as a Python value."""
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value(kv.value) for kv in v.kvlist_value.values}
    if kind == "bytes_value":
        return v.bytes_value.hex()
    return getattr(v, kind) if kind else None


def attributes(kvs) -> dict:
    return {kv.key: value(kv.value) for kv in kvs}


def from_json(body: bytes, violations: list[str]) -> ExportTraceServiceRequest:
    """OTLP JSON: proto3 JSON, but trace and span ids in hex, enums as integers."""
    from google.protobuf import json_format

    def walk(node):
        if isinstance(node, list):
            return [walk(x) for x in node]
        if not isinstance(node, dict):
            return node
        out = {}
        for key, v in node.items():
            if "_" in key:
                violations.append(f"OTLP JSON field name {key!r} is not lowerCamelCase")
            if key in ID_FIELDS and isinstance(v, str):
                v = base64.b64encode(bytes.fromhex(v)).decode()  # ValueError: not hex
            elif key in ENUM_FIELDS and isinstance(v, str):
                violations.append(f"OTLP JSON enum {key!r} given by name {v!r}, not as an integer")
            out[key] = walk(v)
        return out

    return json_format.ParseDict(walk(json.loads(body)), ExportTraceServiceRequest(), ignore_unknown_fields=True)


def check(span: Span, violations: list[str]) -> None:
    where = f"span {span.name!r} ({span.trace_id.hex()}/{span.span_id.hex()})"
    if len(span.trace_id) != 16 or not any(span.trace_id):
        violations.append(f"{where}: trace_id must be 16 bytes, not all zero")
    if len(span.span_id) != 8 or not any(span.span_id):
        violations.append(f"{where}: span_id must be 8 bytes, not all zero")
    if span.parent_span_id and (len(span.parent_span_id) != 8 or not any(span.parent_span_id)):
        violations.append(f"{where}: parent_span_id, when present, must be 8 bytes, not all zero")
    if not span.start_time_unix_nano or not span.end_time_unix_nano:
        violations.append(f"{where}: start or end time missing (0)")
    if span.end_time_unix_nano < span.start_time_unix_nano:
        violations.append(f"{where}: end {span.end_time_unix_nano} < start {span.start_time_unix_nano}")
    if not span.name:
        violations.append(f"{where}: empty name")


def records(request: ExportTraceServiceRequest, headers: dict, violations: list[str]) -> list[dict]:
    out = []
    for rs in request.resource_spans:
        service = attributes(rs.resource.attributes).get("service.name")
        for ss in rs.scope_spans:
            for span in ss.spans:
                check(span, violations)
                try:
                    kind = Span.SpanKind.Name(span.kind)
                except ValueError:
                    kind = str(span.kind)
                try:
                    status = Status.StatusCode.Name(span.status.code)
                except ValueError:
                    status = str(span.status.code)
                out.append({
                    "trace_id": span.trace_id.hex(), "span_id": span.span_id.hex(),
                    "parent_span_id": span.parent_span_id.hex(), "trace_state": span.trace_state,
                    "name": span.name, "kind": kind,
                    "start": span.start_time_unix_nano, "end": span.end_time_unix_nano, "status": status,
                    "attributes": attributes(span.attributes), "service": service,
                    "scope": ss.scope.name, "headers": headers,
                })
    if not out:
        violations.append("a request with no span (an empty envelope)")
    return out


def status_body(message: str, content_type: str) -> bytes:
    """A google.rpc.Status with only its message (field 2), encoded by hand."""
    if content_type == JSON:
        return json.dumps({"message": message}).encode()
    data = message.encode()
    size, n = b"", len(data)
    while True:
        size += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
        n >>= 7
        if not n:
            return b"\x12" + size + data


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as OTLP clients expect

    def log_message(self, format, *a) -> None:  # quiet
        pass

    def read_body(self) -> bytes:
        try:
            return self.read_raw_body()
        except ValueError:  # a bad Content-Length or chunk size
            self.close_connection = True
            raise BadRequest(400, "bad request framing") from None

    def read_raw_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            body = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return body
                body += self.rfile.read(size)
                self.rfile.readline()
                if len(body) > LIMIT:
                    self.close_connection = True
                    raise BadRequest(413, "body past 20 MiB")
        length = int(self.headers.get("Content-Length") or 0)
        if length > LIMIT:
            self.close_connection = True
            raise BadRequest(413, "body past 20 MiB")
        return self.rfile.read(length)

    def serve(self) -> None:
        path = urlsplit(self.path).path
        content_type = self.headers.get("Content-Type", "").split(";")[0].strip().lower()
        encoding = self.headers.get("Content-Encoding", "identity").strip().lower()
        reply_type = JSON if content_type == JSON else PROTOBUF
        spans: list[dict] = []
        violations: list[str] = []
        try:
            body = self.read_body()
            if path != "/v1/traces":
                raise BadRequest(404, f"no such path: {path}")
            if self.command != "POST":
                raise BadRequest(405, f"{self.command} is not allowed: POST only")
            if content_type not in (PROTOBUF, JSON):
                raise BadRequest(415, f"unsupported Content-Type {content_type!r}: {PROTOBUF} or {JSON}")
            if encoding == "gzip":
                inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
                try:
                    body = inflate.decompress(body, LIMIT + 1)
                except zlib.error as e:
                    raise BadRequest(400, f"bad gzip body: {e}") from None
                if len(body) > LIMIT:
                    raise BadRequest(413, "body past 20 MiB once gunzipped")
                if not inflate.eof:
                    raise BadRequest(400, "truncated gzip body")
            elif encoding != "identity":
                raise BadRequest(400, f"unsupported Content-Encoding {encoding!r}")
            try:
                if content_type == JSON:
                    request = from_json(body, violations)
                else:
                    request = ExportTraceServiceRequest.FromString(body)
            except Exception as e:  # DecodeError, json_format.ParseError, ValueError (hex)
                violations.append(f"undecodable {content_type} body: {type(e).__name__}: {e}")
                raise BadRequest(400, f"undecodable {content_type} body: {e}") from None
            headers = {k.lower(): v for k, v in self.headers.items()
                       if k.lower().startswith("x-") or k.lower() == "authorization"}
            spans = records(request, headers, violations)
            status, data = 200, ExportTraceServiceResponse().SerializeToString()
            if reply_type == JSON:
                data = b"{}"
        except BadRequest as e:
            status, data = e.status, status_body(str(e), reply_type)
        append(args.out, spans + [{"violation": v} for v in violations])
        append(args.requests, [{
            "method": self.command, "path": path, "content_type": content_type,
            "content_encoding": encoding, "status": status, "spans": len(spans),
        }])
        self.send_response(status)
        self.send_header("Content-Type", reply_type)
        self.send_header("Content-Length", str(len(data)))
        if status == 405:
            self.send_header("Allow", "POST")
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_POST = do_GET = do_HEAD = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = serve


def main() -> None:
    global args
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: a free one)")
    parser.add_argument("--out", required=True, metavar="FILE", help="append one JSON line per span or violation")
    parser.add_argument("--requests", metavar="FILE", help="append one JSON line per request")
    args = parser.parse_args()
    httpd = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    httpd.daemon_threads = True
    print(f"listening {httpd.server_address[1]}", flush=True)
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
