#!/usr/bin/env python3
"""An MCP client written with the official Python `mcp` package (2.x).

Connects to one server, initializes, lists its tools, optionally calls one,
and prints ONE JSON object on stdout:

  {"server_name": ..., "protocol_version": ..., "tools": [names], "tool_meta": {name: _meta},
   "result": {"isError": ..., "content": [...], "structuredContent": ..., "_meta": ...}}

or, when the call was answered with a JSON-RPC error,

  {"server_name": ..., "protocol_version": ..., "tools": [...], "error": {"code": ..., "message": ...}}

Exit status: 0 when that object was printed (a tool result with isError: true
and a JSON-RPC error both count), 1 when connecting or listing failed (the
reason on stderr, and {"error": {"code": null, "message": ...}} on stdout).

  py_client.py --stdio CMD [ARGS...] [--call NAME --args JSON]
  py_client.py --http URL [--header 'Authorization: Bearer X'] [--call NAME --args JSON]

More, each adding keys to that object (a JSON-RPC error is recorded as
{"error": {"code": ..., "message": ...}} in the place of the answer):

  --tool-defs               "tool_defs": every tool definition as listed
  --progress-runs N         "progress": with --call, the call made N times in
                            turn (30 ms apart) with a progress callback; per call, the
                            progress values the SDK delivered (a report that
                            arrives after its result is dropped by the SDK)
  --calls JSON              "results": one per [name, arguments] pair, in order
  --resources               "resources", "resource_templates": as listed
  --read URI                "reads": {URI: the resources/read result} (repeatable)
  --prompts                 "prompts": as listed
  --prompt NAME             "prompt": the prompts/get result (--prompt-args JSON)
  --complete JSON           "completions": one completion/complete result per
                            {"ref": {"type": "ref/prompt", "name": N} or
                            {"type": "ref/resource", "uri": U}, "argument":
                            {"name": A, "value": V}, "context": {...}} (repeatable)
  --elicit JSON             declare elicitation (form and URL) and answer every
                            request with this ElicitResult ({"action": ..., "content": ...});
                            "elicitations": the params of each request received
                            (--elicit-delay S: answer each after S seconds)
  --sample TEXT             declare sampling and answer every request with this
                            text (model "py-model"); "samplings": the params of each

`--stdio` takes every remaining argument as the command line, so put the other
options before it. The stdio client does not pass the parent environment to
the server (only HOME, PATH, ... by the SDK's rules): `--env KEY=VALUE` (repeatable)
adds variables; `--inherit-env` passes this process's whole environment.
`--mode` picks the SDK's negotiation: `auto` (the SDK default: a `server/discover`
probe, then `initialize` on a pre-2026 server) or `legacy` (`initialize` only).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from contextlib import AsyncExitStack
from typing import Any

import mcp_types as types
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--http", metavar="URL", help="streamable HTTP endpoint, e.g. http://127.0.0.1:8722/mcp")
    target.add_argument("--stdio", nargs=argparse.REMAINDER, metavar="CMD", help="server command and its arguments")
    parser.add_argument("--header", action="append", default=[], help="'Name: value' (HTTP only, repeatable)")
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE for the stdio server (repeatable)")
    parser.add_argument("--inherit-env", action="store_true", help="pass this process's environment to the server")
    parser.add_argument("--call", metavar="NAME", help="tool to call after listing")
    parser.add_argument("--args", metavar="JSON", default="{}", help="tool arguments as a JSON object")
    parser.add_argument("--mode", choices=["auto", "legacy"], default="auto", help="protocol negotiation")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for each answer")
    parser.add_argument("--tool-defs", action="store_true", help="print every tool definition")
    parser.add_argument("--progress-runs", type=int, metavar="N", help="with --call: call it N times with progress")
    parser.add_argument("--calls", metavar="JSON", help="[[name, arguments], ...] to call in order")
    parser.add_argument("--resources", action="store_true", help="list resources and resource templates")
    parser.add_argument("--read", action="append", default=[], metavar="URI", help="read a resource (repeatable)")
    parser.add_argument("--prompts", action="store_true", help="list prompts")
    parser.add_argument("--prompt", metavar="NAME", help="get a prompt")
    parser.add_argument("--prompt-args", metavar="JSON", default="{}", help="the prompt's arguments")
    parser.add_argument("--complete", action="append", default=[], metavar="JSON", help="a completion request (repeatable)")
    parser.add_argument("--elicit", metavar="JSON", help="answer elicitation requests with this ElicitResult")
    parser.add_argument("--sample", metavar="TEXT", help="answer sampling requests with this text")
    parser.add_argument("--elicit-delay", type=float, default=0.0, metavar="S", help="wait S seconds before answering")
    args = parser.parse_args(argv)
    if args.stdio is not None and not args.stdio:
        parser.error("--stdio needs a command")
    return args


def dump(model: Any) -> Any:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


async def answer(request: Any) -> Any:
    """The request's result dumped, or its JSON-RPC error as {"error": ...}."""
    try:
        return dump(await request)
    except MCPError as err:
        error: dict[str, Any] = {"code": err.error.code, "message": err.error.message}
        if err.error.data is not None:
            error["data"] = err.error.data
        return {"error": error}


def reference(ref: dict[str, Any]) -> Any:
    if ref["type"] == "ref/prompt":
        return types.PromptReference(type="ref/prompt", name=ref["name"])
    return types.ResourceTemplateReference(type="ref/resource", uri=ref["uri"])


async def run(args: argparse.Namespace) -> dict[str, Any]:
    async with AsyncExitStack() as stack:
        if args.http:
            headers = {}
            for header in args.header:
                name, _, value = header.partition(":")
                headers[name.strip()] = value.strip()
            http = await stack.enter_async_context(create_mcp_http_client(headers=headers))
            server: Any = streamable_http_client(args.http, http_client=http)
        else:
            env = dict(os.environ) if args.inherit_env else {}
            for pair in args.env:
                key, _, value = pair.partition("=")
                env[key] = value
            server = StdioServerParameters(command=args.stdio[0], args=args.stdio[1:], env=env or None)
        asked: dict[str, list[Any]] = {"elicitations": [], "samplings": []}
        callbacks: dict[str, Any] = {}
        if args.elicit is not None:
            elicited = json.loads(args.elicit)

            async def elicit(context: Any, params: Any) -> Any:
                asked["elicitations"].append(dump(params))
                await asyncio.sleep(args.elicit_delay)
                return types.ElicitResult(**elicited)

            callbacks["elicitation_callback"] = elicit
        if args.sample is not None:

            async def sample(context: Any, params: Any) -> Any:
                asked["samplings"].append(dump(params))
                return types.CreateMessageResult(
                    role="assistant", content=types.TextContent(type="text", text=args.sample), model="py-model"
                )

            callbacks["sampling_callback"] = sample
        client = await stack.enter_async_context(
            Client(server, mode=args.mode, read_timeout_seconds=args.timeout, cache=None, **callbacks)
        )
        info = client.server_info
        out: dict[str, Any] = {
            "server_name": info.name if info else None,
            "protocol_version": client.protocol_version,
        }
        tools = await client.list_tools()
        out["tools"] = [tool.name for tool in tools.tools]
        # Each tool's _meta, where the server gave one (latency metadata lives there).
        out["tool_meta"] = {tool.name: tool.meta for tool in tools.tools if tool.meta}
        if args.tool_defs:
            out["tool_defs"] = [dump(tool) for tool in tools.tools]
        if args.calls:
            out["results"] = [await answer(client.call_tool(n, a)) for n, a in json.loads(args.calls)]
        if args.elicit is not None:
            out["elicitations"] = asked["elicitations"]
        if args.sample is not None:
            out["samplings"] = asked["samplings"]
        if args.resources:
            out["resources"] = (await answer(client.list_resources())).get("resources")
            out["resource_templates"] = (await answer(client.list_resource_templates())).get("resourceTemplates")
        if args.read:
            out["reads"] = {uri: await answer(client.read_resource(uri)) for uri in args.read}
        if args.prompts:
            out["prompts"] = (await answer(client.list_prompts())).get("prompts")
        if args.prompt:
            out["prompt"] = await answer(client.get_prompt(args.prompt, json.loads(args.prompt_args)))
        if args.complete:
            out["completions"] = []
            for c in map(json.loads, args.complete):
                request = client.complete(reference(c["ref"]), c["argument"], c.get("context"))
                out["completions"].append(await answer(request))
        if args.call and args.progress_runs:
            out["progress"] = []
            for _ in range(args.progress_runs):
                seen: list[float] = []

                async def heard(progress: float, total: float | None, message: str | None, seen=seen) -> None:
                    seen.append(progress)

                await client.call_tool(args.call, json.loads(args.args), progress_callback=heard)
                # Callbacks run on tasks of their own: let those already
                # started finish (a late report was dropped, not started).
                # 30 ms apart: under a host's cap on one server's
                # notifications a second.
                await asyncio.sleep(0.03)
                out["progress"].append(seen)
            return out
        if args.call:
            arguments = json.loads(args.args)
            try:
                result = await client.call_tool(args.call, arguments)
            except MCPError as err:
                out["error"] = {"code": err.error.code, "message": err.error.message}
                if err.error.data is not None:
                    out["error"]["data"] = err.error.data
            else:
                data = dump(result)
                out["result"] = {
                    "isError": bool(data.get("isError", False)),
                    "content": data.get("content", []),
                    "structuredContent": data.get("structuredContent"),
                    "_meta": data.get("_meta"),
                }
        return out


def main() -> int:
    args = parse_args(sys.argv[1:])
    try:
        out = asyncio.run(run(args))
    except BaseException as err:  # noqa: BLE001 - report anything, including ExceptionGroups
        if isinstance(err, KeyboardInterrupt):
            raise
        message = f"{type(err).__name__}: {err}"
        if isinstance(err, BaseExceptionGroup):
            message += " [" + "; ".join(f"{type(e).__name__}: {e}" for e in err.exceptions) + "]"
        print(f"py_client: {message}", file=sys.stderr)
        print(json.dumps({"error": {"code": None, "message": message}}))
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
