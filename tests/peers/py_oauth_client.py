#!/usr/bin/env python3
"""The official Python `mcp` package's (2.x) OAuth client, for the OAuth front-door tests.

  py_oauth_client.py call URL TOOL ARGS_JSON --login NAME [--scope S] [--mode legacy|auto]
  py_oauth_client.py token ISSUER CLIENT_ID SECRET RESOURCE [SCOPE]

`call` connects to the streamable HTTP endpoint URL with the SDK's
OAuthClientProvider and no token, so the SDK does the whole MCP authorization
flow itself: the 401, Protected Resource Metadata (the WWW-Authenticate
resource_metadata URL first), authorization server metadata, dynamic client
registration (application_type native, redirect URI
http://localhost:3030/callback, no token_endpoint_auth_method: the server
picks), then the authorization code grant with PKCE S256 and the `resource`
parameter (RFC 8707). The browser is played by this script: it GETs the
authorization URL and drives oidc_provider.mjs's development login (login=NAME,
any password) and consent forms with httpx2, and hands the SDK the code,
state and iss it finds in the redirect to the redirect URI (nothing listens
there). Then `initialize` (--mode legacy, the default; auto: the SDK's
`server/discover` probe first), `tools/call TOOL ARGS_JSON`, and one JSON line
on stdout:

  {"result": <CallToolResult, by alias, without nulls>, "access_token": "<the token the SDK sent>"}

The scope asked for is the SDK's choice (PRM scopes_supported, plus
offline_access when the authorization server lists it), unless --scope.

`token` asks ISSUER's token endpoint (from its /.well-known/openid-configuration)
for a client_credentials token for RESOURCE (client_secret_post) with SCOPE
(default mcp:tools; "" sends none) and prints the access token alone.

Every HTTP request is bounded by 30 s, and `call` as a whole by --timeout (30 s).
Exit status 0 on success; otherwise 1 with the traceback on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import traceback
from html import unescape
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit

import anyio
import httpx2
from mcp import Client
from mcp.client.auth import OAuthClientProvider, oauth2
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

REDIRECT_URI = "http://localhost:3030/callback"
HTTP_TIMEOUT = 30.0


class MemoryStorage:
    """The SDK's TokenStorage, in memory: every run starts unregistered and without a token."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


class DevBrowser:
    """Plays the user at oidc-provider's development login and consent pages."""

    def __init__(self, login: str) -> None:
        self.login = login
        self.result: AuthorizationCodeResult | None = None

    async def redirect_handler(self, authorization_url: str) -> None:
        async with httpx2.AsyncClient(timeout=HTTP_TIMEOUT, follow_redirects=False) as http:
            response = await http.get(authorization_url)
            for _ in range(20):
                if response.is_redirect:
                    location = urljoin(str(response.url), response.headers["location"])
                    if location.startswith(REDIRECT_URI):
                        self.result = self._authorization_response(location)
                        return
                    response = await http.get(location)
                    continue
                if response.status_code != 200:
                    raise RuntimeError(f"authorization server: HTTP {response.status_code} at {response.url}: {response.text[:500]}")
                action, prompt = self._form(response.text)
                form = {"prompt": prompt}
                if prompt == "login":
                    form |= {"login": self.login, "password": "any"}
                elif prompt != "consent":
                    raise RuntimeError(f"unexpected interaction prompt {prompt!r} at {response.url}")
                response = await http.post(urljoin(str(response.url), action), data=form)
            raise RuntimeError("authorization: no redirect to the redirect URI after 20 steps")

    async def callback_handler(self) -> AuthorizationCodeResult:
        if self.result is None:
            raise RuntimeError("authorization: no authorization response")
        return self.result

    @staticmethod
    def _authorization_response(location: str) -> AuthorizationCodeResult:
        query = {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}
        if "error" in query:
            raise RuntimeError(f"authorization error: {query['error']}: {query.get('error_description', '')}")
        return AuthorizationCodeResult(code=query["code"], state=query.get("state"), iss=query.get("iss"))

    @staticmethod
    def _form(html: str) -> tuple[str, str]:
        """The action and hidden `prompt` value of the page's form."""
        action = re.search(r'<form[^>]*\saction="([^"]*)"', html)
        prompt = re.search(r'<input type="hidden" name="prompt" value="([^"]*)"', html)
        if not action or not prompt:
            raise RuntimeError(f"authorization: no login or consent form in the page: {html[:500]}")
        return unescape(action.group(1)), prompt.group(1)


async def call(args: argparse.Namespace) -> dict[str, Any]:
    if args.scope is not None:
        # The SDK picks the scope from the challenge or the metadata (and
        # registers with it); --scope replaces that pick.
        oauth2.get_client_metadata_scopes = lambda *_args, **_kwargs: args.scope
    browser = DevBrowser(args.login)
    storage = MemoryStorage()
    auth = OAuthClientProvider(
        server_url=args.url,
        client_metadata=OAuthClientMetadata(
            client_name="toolhost py_oauth_client",
            redirect_uris=[REDIRECT_URI],
        ),
        storage=storage,
        redirect_handler=browser.redirect_handler,
        callback_handler=browser.callback_handler,
    )
    with anyio.fail_after(args.timeout):
        async with create_mcp_http_client(auth=auth, timeout=httpx2.Timeout(HTTP_TIMEOUT)) as http:
            transport = streamable_http_client(args.url, http_client=http)
            async with Client(transport, mode=args.mode, read_timeout_seconds=HTTP_TIMEOUT, cache=None) as client:
                result = await client.call_tool(args.tool, json.loads(args.args_json))
    if storage.tokens is None:
        raise RuntimeError("the SDK finished without a token")
    return {
        "result": result.model_dump(mode="json", by_alias=True, exclude_none=True),
        "access_token": storage.tokens.access_token,
    }


async def token(args: argparse.Namespace) -> str:
    async with httpx2.AsyncClient(timeout=HTTP_TIMEOUT) as http:
        discovery = await http.get(args.issuer.rstrip("/") + "/.well-known/openid-configuration")
        discovery.raise_for_status()
        form = {
            "grant_type": "client_credentials",
            "client_id": args.client_id,
            "client_secret": args.secret,
            "resource": args.resource,
        }
        if args.scope:
            form["scope"] = args.scope
        response = await http.post(discovery.json()["token_endpoint"], data=form)
        if response.status_code != 200:
            raise RuntimeError(f"token endpoint: HTTP {response.status_code}: {response.text}")
        return response.json()["access_token"]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    c = commands.add_parser("call", help="authorize with the auth code flow, then call one tool")
    c.add_argument("url")
    c.add_argument("tool")
    c.add_argument("args_json")
    c.add_argument("--login", required=True, help="the account name to sign in as (the token's sub)")
    c.add_argument("--scope", help="the scope to register with and ask for (default: the SDK's pick)")
    c.add_argument("--mode", choices=["legacy", "auto"], default="legacy", help="protocol negotiation")
    c.add_argument("--timeout", type=float, default=30.0, help="seconds for the whole run")
    t = commands.add_parser("token", help="print a client_credentials access token")
    t.add_argument("issuer")
    t.add_argument("client_id")
    t.add_argument("secret")
    t.add_argument("resource")
    t.add_argument("scope", nargs="?", default="mcp:tools")
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args(sys.argv[1:])
    try:
        if args.command == "call":
            print(json.dumps(asyncio.run(call(args))))
        else:
            print(asyncio.run(token(args)))
    except BaseException as err:  # noqa: BLE001 - report anything, including ExceptionGroups
        if isinstance(err, KeyboardInterrupt):
            raise
        traceback.print_exception(err)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
