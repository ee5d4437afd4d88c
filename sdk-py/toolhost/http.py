"""HTTP requests from a tool plugin, over ``wasi:http``.

The host sends them, and only to the origins the operator granted in
``plugins.grants.<plugin>.http``, under its address policy, limits and
audit. Python's ``urllib``, ``http.client`` and ``socket`` cannot work in a
plugin (no sockets); this module is how a Python tool calls an API::

    from toolhost import http, secret

    r = http.get(f"{base}/v1/items", params={"q": "lantern"}, bearer=secret.get("api_key"))
    r.raise_for_status()
    items = r.json()

A failure raises ``HttpError``, an ``Err(ToolError_Failed(...))``: left
uncaught in a ``@tool`` function, it reaches the caller as the tool's
error, in the host's words (``https://x.test is not granted to plugin
<name> ...``).
Requests block until the answer is in: a tool call is synchronous, and the
host's deadline for the call bounds the wait. Redirects are not followed:
a 3xx comes back as it is (its ``location`` header names where), and a
request there is another request, checked against the grant like any.
"""

import json as _json
from typing import Any, Dict, Iterable, List, Optional, Tuple, Union
from urllib.parse import urlencode, urlsplit

from componentize_py_types import Err
from wit_world.imports import http_types as t
from wit_world.imports import outgoing_handler, streams
from wit_world.imports.types import ToolError_Failed

__all__ = ["HttpError", "Response", "get", "post", "request"]

# The largest chunk read from a response body at a time.
_CHUNK = 64 * 1024
# The largest chunk written to a request body at a time (wasi:io's check-write bound).
_WRITE = 4096

Headers = Union[Dict[str, str], Iterable[Tuple[str, str]], None]


class HttpError(Err):
    """A request that failed: refused by the host, unreachable, or (from
    ``Response.raise_for_status``) answered with an error status.

    It is an ``Err(ToolError_Failed(message))``, so raising it from ``call``
    fails the call with ``message``. ``kind`` is ``"refused"`` (the host
    said no: not granted, a limit), ``"invalid"`` (a bad URL or header),
    ``"network"``, ``"status"`` (see ``status``) or ``"body"``.
    """

    def __init__(self, message: str, kind: str = "network", status: Optional[int] = None):
        super().__init__(ToolError_Failed(message))
        object.__setattr__(self, "message", message)
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "status", status)

    def __str__(self) -> str:
        return self.message


class Response:
    """An answer: ``status``, ``headers`` (lowercase names, in order) and ``body`` (bytes)."""

    def __init__(self, url: str, status: int, headers: List[Tuple[str, str]], body: bytes):
        self.url = url
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def ok(self) -> bool:
        """True for a 2xx status."""
        return 200 <= self.status < 300

    def header(self, name: str) -> Optional[str]:
        """The first value of the header ``name`` (any case), or ``None``."""
        name = name.lower()
        return next((v for k, v in self.headers if k == name), None)

    def text(self) -> str:
        """The body as UTF-8 text (invalid bytes replaced)."""
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body parsed as JSON; ``HttpError`` (kind ``"body"``) when it is not JSON."""
        try:
            return _json.loads(self.body)
        except ValueError as e:
            raise HttpError(f"{_origin(self.url)} did not answer JSON ({e}): {self.text()[:200]!r}", "body")

    def raise_for_status(self) -> "Response":
        """This response when its status is 2xx; else ``HttpError`` naming the
        status, the origin and the start of the body."""
        if not self.ok:
            raise HttpError(f"HTTP {self.status} from {_origin(self.url)}: {self.text()[:300]}", "status", self.status)
        return self


def get(url: str, *, params: Optional[Dict[str, Any]] = None, headers: Headers = None,
        bearer: Optional[str] = None) -> Response:
    """``GET url`` (with ``params`` appended as a query string)."""
    return request("GET", url, params=params, headers=headers, bearer=bearer)


def post(url: str, *, json: Any = None, body: Optional[bytes] = None, headers: Headers = None,
         bearer: Optional[str] = None) -> Response:
    """``POST url`` with ``json`` (serialized, ``content-type: application/json``) or ``body``."""
    return request("POST", url, json=json, body=body, headers=headers, bearer=bearer)


def request(method: str, url: str, *, params: Optional[Dict[str, Any]] = None, headers: Headers = None,
            body: Optional[bytes] = None, json: Any = None, bearer: Optional[str] = None) -> Response:
    """Sends one request and reads the whole answer.

    ``bearer`` adds ``authorization: Bearer <bearer>``. Raises ``HttpError``
    when the host refuses the request or no answer comes; an answer with an
    error status is returned (see ``Response.raise_for_status``).
    """
    if params:
        url = url + ("&" if "?" in url else "?") + urlencode(params, safe=",:")
    origin = _origin(url)
    fields: List[Tuple[str, bytes]] = []
    if isinstance(headers, dict):
        headers = headers.items()
    for name, value in headers or ():
        fields.append((name.lower(), str(value).encode()))
    if bearer is not None:
        fields.append(("authorization", f"Bearer {bearer}".encode()))
    if json is not None:
        body = _json.dumps(json).encode()
        if not any(n == "content-type" for n, _ in fields):
            fields.append(("content-type", b"application/json"))
    body = body or b""
    if body and not any(n == "content-length" for n, _ in fields):
        fields.append(("content-length", str(len(body)).encode()))

    outgoing = _outgoing(method, url, origin, fields)
    out_body = outgoing.body()
    try:
        pending = outgoing_handler.handle(outgoing, None)
    except Err as e:
        raise _from_code(e.value, origin)
    # The body first. The host drops a refused request, body and all, so a
    # failed write gives way to what the response future says.
    written = _write_body(out_body, body)
    with pending:
        pending.subscribe().block()
        result = pending.get()
    if result is None or isinstance(result, Err):
        raise written or HttpError(f"no response from {origin}")
    if isinstance(result.value, Err):
        raise _from_code(result.value.value, origin)
    return _read(result.value.value, url, origin)


def _outgoing(method: str, url: str, origin: str, fields: List[Tuple[str, bytes]]) -> "t.OutgoingRequest":
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise HttpError(f"invalid URL {url!r}: it must start with http:// or https://", "invalid")
    if not parts.netloc:
        raise HttpError(f"invalid URL {url!r}: no host", "invalid")
    try:
        headers = t.Fields.from_list(fields)
    except Err as e:
        raise HttpError(f"a header for {origin} is refused by wasi:http ({type(e.value).__name__})", "invalid")
    req = t.OutgoingRequest(headers)
    methods = {"GET": t.Method_Get(), "HEAD": t.Method_Head(), "POST": t.Method_Post(), "PUT": t.Method_Put(),
               "DELETE": t.Method_Delete(), "PATCH": t.Method_Patch(), "OPTIONS": t.Method_Options()}
    method = method.upper()
    _set(lambda: req.set_method(methods.get(method) or t.Method_Other(method)), f"method {method}", origin)
    _set(lambda: req.set_scheme(t.Scheme_Https() if scheme == "https" else t.Scheme_Http()), "scheme", origin)
    _set(lambda: req.set_authority(parts.netloc), f"authority {parts.netloc}", origin)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    _set(lambda: req.set_path_with_query(path), f"path {path}", origin)
    return req


def _set(setter, what: str, origin: str) -> None:
    # A setter's result<_, _>: componentize-py raises a bare Err (no
    # message) when wasi:http refuses the value; say which part it was.
    try:
        setter()
    except Err:
        raise HttpError(f"invalid request to {origin}: wasi:http refused the {what}", "invalid")


def _write_body(out_body: "t.OutgoingBody", body: bytes) -> Optional[HttpError]:
    try:
        if body:
            stream = out_body.write()
            with stream:
                for i in range(0, len(body), _WRITE):
                    stream.blocking_write_and_flush(body[i:i + _WRITE])
        t.OutgoingBody.finish(out_body, None)
        return None
    except Err as e:
        return HttpError(f"sending the request body failed ({type(e.value).__name__})")


def _read(incoming: "t.IncomingResponse", url: str, origin: str) -> Response:
    with incoming:
        status = incoming.status()
        with incoming.headers() as fields:
            headers = [(k.lower(), v.decode("utf-8", errors="replace")) for k, v in fields.entries()]
        body = incoming.consume()
        chunks = []
        with body.stream() as stream:
            while True:
                try:
                    chunks.append(stream.blocking_read(_CHUNK))
                except Err as e:
                    if isinstance(e.value, streams.StreamError_Closed):
                        break
                    raise HttpError(f"reading the answer from {origin} failed: {_stream_error(e.value)}", "body")
        t.IncomingBody.finish(body)
    return Response(url, status, headers, b"".join(chunks))


def _stream_error(error) -> str:
    try:
        return error.value.to_debug_string()
    except Exception:
        return type(error).__name__


def _from_code(code, origin: str) -> HttpError:
    """The host's refusal in its own words; other codes named plainly."""
    if isinstance(code, t.ErrorCode_InternalError) and code.value:
        return HttpError(code.value.removeprefix("toolhost: "), "refused")
    name = type(code).__name__.removeprefix("ErrorCode_")
    detail = getattr(code, "value", None)
    words = "".join(" " + c.lower() if c.isupper() else c for c in name).strip()
    return HttpError(f"request to {origin} failed: {words}" + (f" ({detail})" if detail not in (None, "") else ""))


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme.lower()}://{parts.netloc}" if parts.netloc else url
