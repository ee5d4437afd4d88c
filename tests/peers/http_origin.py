#!/usr/bin/env python3
"""An origin server for toolhost's wasi:http tests, standard library only.

  http_origin.py PORT [CERT KEY]   HTTP on 127.0.0.1:PORT (HTTPS with CERT
                                   and KEY), answering:
    /v1/forecast       an Open-Meteo-shaped JSON answer, echoing the
                       request's Authorization header as "authorization"
    /redirect?to=URL   302 to URL
    /trickle           200, then one byte a second, forever
    /huge              200 with a 1 GiB body, written as it goes
    anything else      200 "hello from the origin"
Every request is appended to requests.log in the working directory, with
its W3C `traceparent` header (tp=) and the client's port (peer=), which
tells a kept-alive connection from a new one.
"""

from __future__ import annotations

import http.server
import json
import ssl
import sys
import time
import urllib.parse


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def send(self, code: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        with open("requests.log", "a") as f:
            f.write(
                f"{self.command} {self.path} host={self.headers.get('Host')} "
                f"auth={self.headers.get('Authorization')} tp={self.headers.get('traceparent')} "
                f"peer={self.client_address[1]}\n"
            )
        url = urllib.parse.urlparse(self.path)
        if url.path == "/v1/forecast":
            body = {
                "current": {"temperature_2m": 12.5, "wind_speed_10m": 3.4},
                "authorization": self.headers.get("Authorization"),
            }
            self.send(200, json.dumps(body).encode(), {"Content-Type": "application/json"})
        elif url.path == "/redirect":
            to = urllib.parse.parse_qs(url.query)["to"][0]
            self.send(302, b"", {"Location": to})
        elif url.path == "/trickle":
            self.send_response(200)
            self.send_header("Content-Length", "1000000")
            self.end_headers()
            try:
                while True:
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(1)
            except OSError:
                pass
        elif url.path == "/huge":
            total = 1 << 30
            self.send_response(200)
            self.send_header("Content-Length", str(total))
            self.end_headers()
            chunk = b"h" * (1 << 20)
            sent = 0
            try:
                while sent < total:
                    self.wfile.write(chunk)
                    sent += len(chunk)
            except OSError:
                pass
            with open("requests.log", "a") as f:
                f.write(f"huge: wrote {sent}\n")
        else:
            self.send(200, b"hello from the origin", {"Content-Type": "text/plain"})

    def log_message(self, *args) -> None:
        pass


def main() -> None:
    port = int(sys.argv[1])
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    if len(sys.argv) == 4:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(sys.argv[2], sys.argv[3])
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
