#!/usr/bin/env python3
"""A voice client on toolhost's OpenAI Realtime relay, with the official `openai` SDK.

toolhost (`toolhost serve --http`) speaks the OpenAI Realtime wire format at
/voice and relays it to the upstream voice API. It declares the agent's tools
itself and runs their function calls; this client only talks, and may add
client-side tools of its own (--tool), whose calls the relay leaves to it.

Reads utterances from stdin, one per line. For each: appends it to the input
audio buffer and commits it, then prints every server event as one JSON line
on stdout until that utterance's final `response.done` (one without a
function call in its output). A call of a --tool function is answered here
with the output "client-side result". Exits 0 at end of input, after closing
the session.

A line `/wait TYPE` speaks nothing: it prints events until one of TYPE
arrives (for example `/wait session.updated`, to watch toolhost re-declare
the tools after the DM overrode the agent's tier).

Audio: real audio is PCM16 (24 kHz mono); this example sends each line's
UTF-8 bytes instead, which a scripted test upstream reads back as text.

Example (the token is a toolhost token, not an OpenAI key):

  echo "what's the weather in Paris" | \\
    python openai_realtime.py --url ws://127.0.0.1:8722/voice --token "$TOOLHOST_TOKEN"

The SDK connects to URL/realtime?model=MODEL with `Authorization: Bearer TOKEN`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import sys

from openai import AsyncOpenAI
from websockets.exceptions import ConnectionClosed

# The fields worth printing, when an event has them.
SHOWN = ("transcript", "text", "delta", "name", "call_id", "arguments", "item_id", "response_id", "error")


def emit(obj: dict) -> None:
    print(json.dumps(obj), flush=True)


def summarize(event: dict) -> dict:
    """One printed line: the event's type and its interesting fields."""
    out = {"type": event.get("type")}
    out.update((k, event[k]) for k in SHOWN if k in event)
    if "session" in event:  # session.created / session.updated: the declared tools
        out["tools"] = [t.get("name") or t.get("server_label") for t in event["session"].get("tools") or []]
    if "item" in event:
        item = event["item"]
        out["item"] = {k: item[k] for k in ("type", "name", "call_id", "status", "role") if k in item}
    if "response" in event:
        response = event["response"]
        out["status"] = response.get("status")
        out["output"] = [{k: i[k] for k in ("type", "name", "call_id") if k in i}
                         for i in response.get("output") or []]
    return out


def client_tool(name: str) -> dict:
    """A function tool this client declares and answers itself."""
    return {"type": "function", "name": name, "description": f"Client-side tool {name}, answered by this client.",
            "parameters": {"type": "object", "properties": {}}}


async def until(conn, last, timeout: float) -> dict:
    """Prints each event until one for which `last(event)` holds; returns it."""
    while True:
        event = await asyncio.wait_for(conn.recv(), timeout)
        data = event if isinstance(event, dict) else event.to_dict()
        emit(summarize(data))
        if last(data):
            return data


async def until_final(conn, own_tools: set[str], timeout: float) -> None:
    """Prints events until a response.done without a function call in its output."""
    while True:
        data = await until(conn, lambda e: e.get("type") == "response.done", timeout)
        calls = [i for i in data["response"].get("output") or [] if i.get("type") == "function_call"]
        if not calls:
            return
        # Calls of the agent's tools are run by toolhost; only ours are answered here.
        mine = [c for c in calls if c.get("name") in own_tools]
        for call in mine:
            await conn.conversation.item.create(
                item={"type": "function_call_output", "call_id": call["call_id"], "output": "client-side result"})
        if mine:
            await conn.response.create()


async def run(args: argparse.Namespace) -> None:
    client = AsyncOpenAI(api_key=args.token, websocket_base_url=args.url)
    async with client.realtime.connect(model=args.model) as conn:
        # Input transcription on: toolhost starts each turn (and picks its tools'
        # latency tier) from the transcript of what the player said.
        session = {"type": "realtime", "instructions": args.instructions, "output_modalities": ["text"],
                   "audio": {"input": {"transcription": {"model": "gpt-4o-mini-transcribe"}}}}
        if args.tool:
            session["tools"] = [client_tool(name) for name in args.tool]
        await conn.session.update(session=session)
        await until(conn, lambda e: e.get("type") == "session.updated", args.timeout)
        # Read stdin off the event loop, so the connection is served while we wait.
        while line := await asyncio.to_thread(sys.stdin.readline):
            utterance = line.strip()
            if not utterance:
                continue
            if utterance.startswith("/wait "):
                kind = utterance.removeprefix("/wait ").strip()
                await until(conn, lambda e: e.get("type") == kind, args.timeout)
                continue
            audio = base64.b64encode(utterance.encode()).decode()
            await conn.input_audio_buffer.append(audio=audio)
            await conn.input_audio_buffer.commit()
            await until_final(conn, set(args.tool), args.timeout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True, help="toolhost's Realtime endpoint, e.g. ws://127.0.0.1:8722/voice")
    parser.add_argument("--token", required=True, help="toolhost bearer token (sent as the API key)")
    parser.add_argument("--model", default="gpt-realtime", help="model asked for in the URL (default: %(default)s)")
    parser.add_argument("--tool", action="append", default=[], metavar="NAME",
                        help="declare a client-side function tool NAME and answer its calls (repeatable)")
    parser.add_argument("--instructions", default="You are a helpful voice assistant. Be brief.",
                        help="session instructions")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for each event")
    args = parser.parse_args()
    try:
        asyncio.run(run(args))
    except ConnectionClosed as err:
        print(f"openai_realtime: connection closed: {err}", file=sys.stderr)
        return 1
    except asyncio.TimeoutError:
        print(f"openai_realtime: no event for {args.timeout} s", file=sys.stderr)
        return 1
    except Exception as err:  # the SDK's errors (bad URL, refused handshake, ...)
        print(f"openai_realtime: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
