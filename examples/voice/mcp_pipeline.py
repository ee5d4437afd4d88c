#!/usr/bin/env python3
"""A voice pipeline's MCP side, with the official `mcp` SDK, on toolhost.

A voice pipeline (speech-to-text, an LLM, text-to-speech) that gets its tools
over MCP from toolhost's agent endpoint, URL/mcp/AGENT. toolhost picks which
of the agent's tools are visible from what the user says: the pipeline's
speech-to-text hook posts each transcript to URL/mcp/AGENT/turn for its MCP
session, and toolhost answers with the turn's tier and tools, and announces a
changed tool set on the session with `notifications/tools/list_changed`.

Reads transcripts from stdin, one per line. Prints one JSON line per event:

  {"type": "tools", "names": [...]}           the tools, at start and after each turn
  {"type": "turn", "tier", "reason", "turn", "sessions", "tools"}   the turn's answer
  {"type": "list_changed"}                    when the notification arrives

After each turn it waits up to --wait seconds for the notification, then
lists the tools again. Exits 0 at end of input, after closing the session.

  python mcp_pipeline.py --url http://127.0.0.1:8722 --agent guide --token "$TOOLHOST_TOKEN" < transcripts.txt
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def emit(obj: dict) -> None:
    print(json.dumps(obj), flush=True)


class Pipeline:
    """The MCP session's id and its tool-list notifications."""

    def __init__(self) -> None:
        self.session_id: str | None = None
        self.list_changed = asyncio.Event()

    async def on_response(self, response) -> None:
        """HTTP response hook: the server names the session in `Mcp-Session-Id`.

        (The SDK's transport keeps the id to itself; this hook sees it too.)
        """
        self.session_id = response.headers.get("mcp-session-id") or self.session_id

    async def on_message(self, message) -> None:
        """The session's message handler: server notifications land here."""
        if isinstance(message, types.ToolListChangedNotification):
            emit({"type": "list_changed"})
            self.list_changed.set()


async def list_tools(client: Client) -> None:
    tools = await client.list_tools()
    emit({"type": "tools", "names": [tool.name for tool in tools.tools]})


async def run(args: argparse.Namespace) -> None:
    pipeline = Pipeline()
    endpoint = f"{args.url.rstrip('/')}/mcp/{args.agent}"
    async with create_mcp_http_client(headers={"Authorization": f"Bearer {args.token}"}) as http:
        http.event_hooks = {"response": [pipeline.on_response]}
        # mode="legacy": the initialize handshake opens a session with an Mcp-Session-Id,
        # which the turn endpoint needs. cache=None: list tools afresh after each turn.
        async with Client(streamable_http_client(endpoint, http_client=http), mode="legacy",
                          message_handler=pipeline.on_message, cache=None) as client:
            if not pipeline.session_id:
                raise RuntimeError("the server opened no session (no Mcp-Session-Id header)")
            await list_tools(client)
            # Read stdin off the event loop, so notifications are handled while we wait.
            while line := await asyncio.to_thread(sys.stdin.readline):
                transcript = line.strip()
                if not transcript:
                    continue
                pipeline.list_changed.clear()
                response = await http.post(f"{endpoint}/turn", json={"utterance": transcript},
                                           headers={"Mcp-Session-Id": pipeline.session_id})
                if response.status_code != 200:
                    raise RuntimeError(f"POST {endpoint}/turn: {response.status_code} {response.text}")
                emit({"type": "turn", **response.json()})
                try:
                    await asyncio.wait_for(pipeline.list_changed.wait(), args.wait)
                except asyncio.TimeoutError:
                    pass  # the turn left the visible tools as they were
                await list_tools(client)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True, help="toolhost's base URL, e.g. http://127.0.0.1:8722")
    parser.add_argument("--agent", required=True, help="the agent whose endpoint to use (URL/mcp/AGENT)")
    parser.add_argument("--token", required=True, help="toolhost bearer token for that agent")
    parser.add_argument("--wait", type=float, default=1.0,
                        help="seconds to wait for tools/list_changed after a turn (default: %(default)s)")
    args = parser.parse_args()
    try:
        asyncio.run(run(args))
    except BaseException as err:  # noqa: BLE001 - report anything, including ExceptionGroups
        if isinstance(err, KeyboardInterrupt):
            raise
        message = f"{type(err).__name__}: {err}"
        if isinstance(err, BaseExceptionGroup):
            message += " [" + "; ".join(f"{type(e).__name__}: {e}" for e in err.exceptions) + "]"
        print(f"mcp_pipeline: {message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
