#!/usr/bin/env python3
"""What the voice relay adds: one relayed event, and one tool call.

Starts the scripted upstream (tests/peers/voice_upstream.py, OpenAI Realtime
format) and `toolhost serve --http` relaying to it, then measures, over one
WebSocket session each, alternating rounds:

  event  `input_audio_buffer.clear` sent, `input_audio_buffer.cleared` back:
         one client event and one server event through the relay, which
         parses, inspects and forwards both;
  call   a user message asking for a roll, `response.create`, then the
         upstream's `roll` function call, its output and the model's
         answer (`response.done` without a call). Direct, the client runs
         the call itself (a client-side tool answering at once); relayed,
         toolhost runs `roll` in its sandbox and answers upstream.

  direct   the client connected to the scripted upstream itself;
  relayed  the client connected to toolhost's /voice/realtime.

The upstream validates and logs every message in both cases, so the
difference of the medians is what the relay adds. Prints a Markdown table:
p50 and p99 per case, and relayed minus direct.

  tests/peers/.venv/bin/python crates/bench/voice/relay_bench.py \\
      [--toolhost target/release/toolhost] [--events 2000] [--calls 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import websockets

REPO = Path(__file__).resolve().parents[3]
TOKEN = "bench-token-0123456789abcdef"
ROLL = {"type": "function", "name": "roll", "description": "Roll dice.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}}}


def start_upstream(tmp: Path) -> tuple[subprocess.Popen, int]:
    scenario = tmp / "scenario.json"
    scenario.write_text(json.dumps({"calls": {"roll please": {"name": "roll", "arguments": {"expression": "1d20"}}}}))
    p = subprocess.Popen([sys.executable, str(REPO / "tests/peers/voice_upstream.py"), "--format", "openai",
                          "--log", str(tmp / "upstream.jsonl"), "--scenario", str(scenario)],
                         stdout=subprocess.PIPE, text=True)
    return p, int(p.stdout.readline().strip().rsplit(":", 1)[1])


def start_toolhost(binary: str, tmp: Path, upstream: int) -> tuple[subprocess.Popen, str]:
    (tmp / "toolhost.yaml").write_text(f"""
npcs:
  - {{name: Bench, budget_tier: deep, tools: [roll]}}
server:
  tokens: [{{token: {TOKEN}, agent: Bench}}]
voice:
  openai: {{url: "ws://127.0.0.1:{upstream}/v1"}}
""")
    env = dict(os.environ, OPENAI_API_KEY="sk-bench", TOOLHOST_STATE_DIR=str(tmp / "state"))
    p = subprocess.Popen([binary, "serve", "--http", "127.0.0.1:0"], cwd=tmp, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    first = p.stdout.readline()
    return p, first.split()[-1].replace("http://", "")


async def until(ws, kind: str) -> dict:
    """The next event of type `kind` (others are skipped)."""
    while True:
        e = json.loads(await ws.recv())
        if e["type"] == kind:
            return e


async def session(url: str, direct: bool):
    ws = await websockets.connect(url, additional_headers={"Authorization": f"Bearer {TOKEN}"},
                                  max_size=None, compression=None)
    await until(ws, "session.created")
    update = {"type": "session.update", "session": {"type": "realtime", "output_modalities": ["text"]}}
    if direct:
        update["session"]["tools"] = [ROLL]
    await ws.send(json.dumps(update))
    await until(ws, "session.updated")
    if not direct:
        # The relay's own declaration (after session.created) is answered too.
        await until(ws, "session.updated")
    return ws


async def events(ws, n: int) -> list[float]:
    out = []
    clear = json.dumps({"type": "input_audio_buffer.clear"})
    for _ in range(n):
        t = time.perf_counter()
        await ws.send(clear)
        await until(ws, "input_audio_buffer.cleared")
        out.append(time.perf_counter() - t)
    return out


async def calls(ws, n: int, direct: bool) -> list[float]:
    out = []
    ask = json.dumps({"type": "conversation.item.create", "item": {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": "roll please"}]}})
    for _ in range(n):
        await ws.send(ask)
        t = time.perf_counter()
        await ws.send(json.dumps({"type": "response.create"}))
        while True:
            e = json.loads(await ws.recv())
            if direct and e["type"] == "response.function_call_arguments.done":
                # The client runs the call itself, at once.
                await ws.send(json.dumps({"type": "conversation.item.create", "item": {
                    "type": "function_call_output", "call_id": e["call_id"],
                    "output": json.dumps({"expression": "1d20", "rolls": [7], "total": 7})}}))
                await ws.send(json.dumps({"type": "response.create"}))
            if e["type"] == "response.done" and all(
                    i.get("type") != "function_call" for i in e["response"].get("output", [])):
                break
        out.append(time.perf_counter() - t)
    return out


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1e6


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--toolhost", default=str(REPO / "target/release/toolhost"))
    p.add_argument("--events", type=int, default=2000)
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        up, port = start_upstream(tmp)
        host, addr = start_toolhost(args.toolhost, tmp, port)
        try:
            urls = {"direct": f"ws://127.0.0.1:{port}/v1/realtime?model=gpt-realtime",
                    "relayed": f"ws://{addr}/voice/realtime?model=gpt-realtime"}
            got = {(k, c): [] for k in urls for c in ("event", "call")}
            socks = {k: await session(u, k == "direct") for k, u in urls.items()}
            for ws in socks.values():  # warm-up
                await events(ws, 100)
            await calls(socks["direct"], 10, True)
            await calls(socks["relayed"], 10, False)
            for r in range(args.rounds):
                order = ["direct", "relayed"] if r % 2 == 0 else ["relayed", "direct"]
                for k in order:
                    got[(k, "event")] += await events(socks[k], args.events // args.rounds)
                    got[(k, "call")] += await calls(socks[k], args.calls // args.rounds, k == "direct")
            for ws in socks.values():
                await ws.close()
        finally:
            host.terminate()
            up.terminate()
            host.wait()
            up.wait()
    print(f"| what | direct p50 (µs) | direct p99 | relayed p50 | relayed p99 | added at p50 |")
    print("|---|---|---|---|---|---|")
    for c, name in (("event", "one event each way"), ("call", "one tool call, asked to answered")):
        d, r = got[("direct", c)], got[("relayed", c)]
        dm, rm = statistics.median(d) * 1e6, statistics.median(r) * 1e6
        print(f"| {name} (n={len(d)}) | {dm:.0f} | {pct(d, .99):.0f} | {rm:.0f} | {pct(r, .99):.0f} | "
              f"{rm - dm:+.0f} µs ({rm / dm:.2f}x) |")


if __name__ == "__main__":
    asyncio.run(main())
