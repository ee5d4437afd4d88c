#!/usr/bin/env python3
"""MCP *tasks* for long tool calls, driven with the official Python `mcp` package (2.x).

Connects to one server, lists its tools, runs ONE action and prints ONE JSON
object on stdout. Every object carries "protocol_version" (the negotiated one).
Which tasks wire is used follows the negotiated version, not the flag:

  2026-07-28 (`--mode auto` against a modern server): the
  `io.modelcontextprotocol/tasks` extension (SEP-2663). The client declares it
  (a `ClientExtension` with a `ResultClaim` for resultType "task"), `tools/call`
  answers {"resultType": "task", "taskId", "status", "createdAt",
  "lastUpdatedAt", "ttlMs", "pollIntervalMs"}, `tasks/get {"taskId"}` answers
  the task's state ({"resultType": "complete", "taskId", "status", ...,
  "result": <CallToolResult when completed>, "error": <JSON-RPC error when
  failed>}) and `tasks/cancel {"taskId"}` answers {"resultType": "complete"}.
  Both tasks/* requests carry the `Mcp-Name: <taskId>` header.

  2025-11-25 (`--mode legacy`, or auto falling back): the experimental tasks of
  that revision. `tools/call` carries `params.task = {"ttl": MS}` and answers a
  CreateTaskResult {"task": {...}}; then `tasks/get`, `tasks/result`,
  `tasks/cancel`, `tasks/list` with the SDK's 2025-11-25 types.

Actions (exactly one):

  --run            create a task for --tool, poll tasks/get (sleeping the
                   server's poll interval, at least 20 ms; --timeout overall)
                   until a terminal status; in 2025-11-25 then tasks/result:
                   {"created": <task handle>, "polled": [each status seen],
                    "final": <last tasks/get answer>, "result": <CallToolResult:
                    tasks/result's in 2025-11-25, final.result in 2026-07-28>}
                   ("timed_out": true when --timeout ran out first;
                   "result" is {"error": ...} for a failed task)
  --run --transparent
                   plain `client.call_tool(NAME, ARGS)`; the extension's
                   resolver polls the task to its end (2026-07-28 only; on
                   2025-11-25 this is an ordinary call): {"result": ...} plus
                   "created", "polled", "final" as the resolver saw them
  --cancel         create a task, send tasks/cancel at once, then tasks/get
                   until terminal: {"created", "cancel": <ack>, "polled", "final"}
  --flood N        create N tasks as fast as possible, --concurrency C (50) in
                   flight at once: {"created": <count of task handles>,
                   "errors": {"<code> <message, first 120 chars>": count},
                   "other": <count of plain results>}; with --after NAME2
                   [--after-args JSON], then a plain call of NAME2: "after"
  --list           tasks/list (2025-11-25): {"list": <answer>}
  --get ID         tasks/get of a task created elsewhere: {"get": <answer>}
  --create         create a task only: {"created": <handle>} (a plain result or an
                   error in "result" when no task was made)
  --wait ID        poll a task made elsewhere to its end: "polled", "final", "result"
  --cancel-id ID   tasks/cancel of a task made elsewhere, then tasks/get:
                   {"cancel": <answer>, "get": <answer>}

In the 2025-11-25 create paths, "sdk_validation" tells whether the SDK's own
`ClientSession.send_request` would have accepted the `tools/call` answer
("ok", or its validation error): the SDK checks every `tools/call` answer
against that revision's CallToolResult, whose `content` is required, so it
rejects a bare CreateTaskResult. This script therefore sends the task-augmented
`tools/call` through the session's dispatcher (with the session's own header
stamp) and parses the answer as `CreateTaskResult` itself.
With --flood in that revision, an answer the SDK's models reject counts as an
error "invalid <what was wrong>".

A JSON-RPC error is recorded as {"error": {"code", "message", "data"?}} in
place of that answer, and an answer the SDK's models reject as
{"error": {"code": null, "message": "invalid ..."}}. Answers are dumped as the
SDK's models hold them, camelCase, null fields left out. Exit status: 0 when the
object was printed, 1 when connecting or listing failed (the reason on stderr,
and {"error": {"code": null, "message": ...}} on stdout).

  py_tasks.py --http URL [--header 'Authorization: Bearer X'] --tool NAME --args JSON --run
  py_tasks.py --mode legacy --tool NAME --ttl 60000 --cancel --stdio CMD [ARGS...]

`--stdio` takes every remaining argument as the command line, so put the other
options before it. The stdio client does not pass the parent environment to
the server (only HOME, PATH, ... by the SDK's rules): `--env KEY=VALUE` (repeatable)
adds variables; `--inherit-env` passes this process's whole environment.
`--mode` picks the SDK's negotiation: `auto` (the SDK default: a `server/discover`
probe, then `initialize` on a pre-2026 server) or `legacy` (`initialize` only).
`--timeout` bounds each request and the whole polling of one task.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from contextlib import AsyncExitStack
from typing import Any, Literal

import mcp_types as types
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types import methods
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ConfigDict, ValidationError

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
TERMINAL = frozenset({"completed", "failed", "cancelled"})
MIN_POLL_SECONDS = 0.02


# --- 2026-07-28: the tasks extension's wire shapes (the SDK has none) -------


class TaskHandle(types.Result):
    """The `tools/call` answer that creates a task (resultType "task")."""

    model_config = ConfigDict(extra="allow")

    result_type: Literal["task"]
    task_id: str
    status: types.TaskStatus
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None


class TaskState(types.Result):
    """The `tasks/get` answer: the task's state, with its outcome once terminal."""

    model_config = ConfigDict(extra="allow")

    result_type: str | None = None
    task_id: str
    status: types.TaskStatus
    status_message: str | None = None
    created_at: str | None = None
    last_updated_at: str | None = None
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None
    result: dict[str, Any] | None = None
    """The CallToolResult, when completed."""
    error: dict[str, Any] | None = None
    """The JSON-RPC error object, when failed."""


class TaskAck(types.Result):
    """The `tasks/cancel` answer ({"resultType": "complete"})."""

    model_config = ConfigDict(extra="allow")

    result_type: str | None = None


class ExtGetTaskRequest(types.GetTaskRequest):
    """`tasks/get` whose `taskId` the session mirrors into the `Mcp-Name` header (SEP-2663)."""

    name_param = "taskId"


class ExtCancelTaskRequest(types.CancelTaskRequest):
    """`tasks/cancel` whose `taskId` the session mirrors into the `Mcp-Name` header (SEP-2663)."""

    name_param = "taskId"


class TaskNotCompleted(Exception):
    """A transparently resolved task ended without a result (cancelled, or failed with no error)."""

    def __init__(self, final: dict[str, Any], timed_out: bool = False) -> None:
        status = final.get("status")
        super().__init__(
            f"task still {status!r} when --timeout ran out" if timed_out else f"task ended {status!r} without a result"
        )
        self.final = final


class TasksExtension(ClientExtension):
    """Declares the tasks extension; its claim's resolver polls a task to its end."""

    identifier = TASKS_EXTENSION

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        # What the resolver saw (one transparent call per run).
        self.created: Any = None
        self.polled: list[Any] = []
        self.final: Any = None
        self.timed_out = False

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=TaskHandle, resolve=self.resolve)]

    async def resolve(self, handle: TaskHandle, ctx: ClaimContext) -> types.CallToolResult:
        self.created = dump(handle)
        self.polled, self.final, self.timed_out = await poll(
            ctx.session, True, handle.task_id, handle.poll_interval_ms, self.timeout, ctx.read_timeout_seconds
        )
        final = self.final
        if "status" not in final:  # tasks/get itself failed
            raise mcp_error(final["error"])
        if final["status"] == "completed":
            return types.CallToolResult.model_validate(final.get("result"), by_name=False)
        if final["status"] == "failed" and isinstance(final.get("error"), dict):
            raise mcp_error(final["error"])
        raise TaskNotCompleted(final, self.timed_out)


# --- plumbing ------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--http", metavar="URL", help="streamable HTTP endpoint, e.g. http://127.0.0.1:8722/mcp")
    target.add_argument("--stdio", nargs=argparse.REMAINDER, metavar="CMD", help="server command and its arguments")
    parser.add_argument("--header", action="append", default=[], help="'Name: value' (HTTP only, repeatable)")
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE for the stdio server (repeatable)")
    parser.add_argument("--inherit-env", action="store_true", help="pass this process's environment to the server")
    parser.add_argument("--mode", choices=["auto", "legacy"], default="auto", help="protocol negotiation")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds for each answer and for one task's polling")
    parser.add_argument("--tool", metavar="NAME", help="the long tool to run as a task")
    parser.add_argument("--args", metavar="JSON", default="{}", help="its arguments as a JSON object")
    parser.add_argument("--ttl", type=int, metavar="MS", help="requested task TTL (2025-11-25 `task.ttl`)")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--run", action="store_true", help="create a task and poll it to its end")
    action.add_argument("--cancel", action="store_true", help="create a task, cancel it, poll it to its end")
    action.add_argument("--flood", type=int, metavar="N", help="create N tasks as fast as possible")
    action.add_argument("--list", action="store_true", help="tasks/list (2025-11-25)")
    action.add_argument("--get", metavar="ID", help="tasks/get of this task")
    action.add_argument("--create", action="store_true", help="create a task and print its handle only")
    action.add_argument("--wait", metavar="ID", help="poll this task to its end, then its result")
    action.add_argument("--cancel-id", metavar="ID", help="cancel this task, then tasks/get it")
    parser.add_argument("--transparent", action="store_true", help="with --run: a plain call_tool, resolved by the extension")
    parser.add_argument("--concurrency", type=int, default=50, metavar="C", help="with --flood: requests in flight")
    parser.add_argument("--after", metavar="NAME2", help="with --flood: then call this tool plainly")
    parser.add_argument("--after-args", metavar="JSON", default="{}", help="its arguments as a JSON object")
    args = parser.parse_args(argv)
    if args.stdio is not None and not args.stdio:
        parser.error("--stdio needs a command")
    if (args.run or args.cancel or args.create or args.flood is not None) and not args.tool:
        parser.error("--run, --cancel and --flood need --tool")
    if args.flood is not None and (args.flood < 0 or args.concurrency < 1):
        parser.error("--flood needs N >= 0 and --concurrency >= 1")
    return args


def dump(model: Any) -> Any:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def error_of(err: MCPError) -> dict[str, Any]:
    error: dict[str, Any] = {"code": err.error.code, "message": err.error.message}
    if err.error.data is not None:
        error["data"] = err.error.data
    return error


def mcp_error(error: dict[str, Any]) -> MCPError:
    return MCPError(code=error.get("code", 0), message=str(error.get("message", "")), data=error.get("data"))


def invalid(err: ValidationError) -> dict[str, Any]:
    return {"error": {"code": None, "message": f"invalid {err.title}: {err}"}}


async def answer(request: Any) -> Any:
    """The request's result dumped, or its JSON-RPC error (or the SDK's rejection) as {"error": ...}."""
    try:
        return dump(await request)
    except MCPError as err:
        return {"error": error_of(err)}
    except ValidationError as err:
        return invalid(err)


def is_modern(session: ClientSession) -> bool:
    return session.protocol_version in MODERN_PROTOCOL_VERSIONS


async def get_task(session: ClientSession, modern: bool, task_id: str, timeout: float | None = None) -> Any:
    if modern:
        request: Any = ExtGetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id))
        return await answer(session.send_request(request, TaskState, request_read_timeout_seconds=timeout))
    request = types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id))
    return await answer(session.send_request(request, types.GetTaskResult, request_read_timeout_seconds=timeout))


async def cancel_task(session: ClientSession, modern: bool, task_id: str) -> Any:
    if modern:
        request: Any = ExtCancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id))
        return await answer(session.send_request(request, TaskAck))
    request = types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id))
    return await answer(session.send_request(request, types.CancelTaskResult))


async def poll(
    session: ClientSession,
    modern: bool,
    task_id: str,
    interval_ms: int | None,
    budget: float,
    request_timeout: float | None = None,
) -> tuple[list[Any], Any, bool]:
    """tasks/get until a terminal status (or a failed get), for at most `budget` seconds.

    Returns (each status seen, the last answer, whether the budget ran out first).
    """
    deadline = time.monotonic() + budget
    polled: list[Any] = []
    interval_key = "pollIntervalMs" if modern else "pollInterval"
    while True:
        state = await get_task(session, modern, task_id, request_timeout)
        if "status" not in state:
            return polled, state, False
        polled.append(state["status"])
        if state["status"] in TERMINAL:
            return polled, state, False
        interval_ms = state.get(interval_key, interval_ms)
        pause = max(MIN_POLL_SECONDS, (interval_ms or 0) / 1000)
        left = deadline - time.monotonic()
        if left <= 0:
            return polled, state, True
        await asyncio.sleep(min(pause, left))


async def legacy_create(
    session: ClientSession, name: str, arguments: dict[str, Any], ttl: int | None, timeout: float
) -> dict[str, Any]:
    """A task-augmented `tools/call` on a 2025-11-25 session.

    Returns {"created": CreateTaskResult dumped} or {"plain": CallToolResult
    dumped} or {"error": ...}, with "sdk_validation" and (when the SDK's models
    reject the answer) "raw".
    """
    request = types.CallToolRequest(
        params=types.CallToolRequestParams(name=name, arguments=arguments, task=types.TaskMetadata(ttl=ttl))
    )
    # ClientSession.send_request, minus its `tools/call` surface check (which
    # requires `content`, so it refuses every CreateTaskResult): same dump, same
    # header stamp, same dispatcher.
    data = request.model_dump(by_alias=True, mode="json", exclude_none=True)
    opts: Any = {"timeout": timeout}
    session._stamp(data, opts)  # pyright: ignore[reportPrivateUsage]
    try:
        raw = await session._dispatcher.send_raw_request(  # pyright: ignore[reportPrivateUsage]
            data["method"], data.get("params"), opts
        )
    except MCPError as err:
        return {"error": error_of(err)}
    out: dict[str, Any] = {}
    try:
        methods.validate_server_result("tools/call", session.protocol_version or "2025-11-25", raw)
        out["sdk_validation"] = "ok"
    except (ValidationError, KeyError, ValueError) as err:
        out["sdk_validation"] = " ".join(f"{type(err).__name__}: {err}".split())
    try:
        if "task" in raw:
            out["created"] = dump(types.CreateTaskResult.model_validate(raw, by_name=False))
        else:
            out["plain"] = dump(types.CallToolResult.model_validate(raw, by_name=False))
    except ValidationError as err:
        out.update(invalid(err))
        out["raw"] = raw
    return out


async def modern_create(session: ClientSession, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A `tools/call` on a 2026-07-28 session, the claimed task handle returned raw (`allow_claimed`)."""
    try:
        result = await session.call_tool(name, arguments, allow_claimed=True)
    except MCPError as err:
        return {"error": error_of(err)}
    except ValidationError as err:
        return invalid(err)
    if isinstance(result, TaskHandle):
        return {"created": dump(result)}
    return {"plain": dump(result)}


async def create(client: Client, args: argparse.Namespace, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    if is_modern(client.session):
        return await modern_create(client.session, name, arguments)
    return await legacy_create(client.session, name, arguments, args.ttl, args.timeout)


def handle_id(created: dict[str, Any]) -> tuple[str, int | None]:
    """The task id and poll interval of a dumped handle (2026 TaskHandle or 2025 CreateTaskResult)."""
    if "task" in created:
        return created["task"]["taskId"], created["task"].get("pollInterval")
    return created["taskId"], created.get("pollIntervalMs")


def creation_keys(made: dict[str, Any], out: dict[str, Any]) -> dict[str, Any] | None:
    """Copy a creation's outcome into `out`; the created handle, or None when no task was made."""
    if "sdk_validation" in made:
        out["sdk_validation"] = made["sdk_validation"]
    if "raw" in made:
        out["raw"] = made["raw"]
    out["created"] = made.get("created")
    if "created" in made:
        return made["created"]
    # No task: a plain result or an error stands in the place of the result.
    out["result"] = made["plain"] if "plain" in made else {"error": made["error"]}
    return None


# --- actions -------------------------------------------------------------------


async def do_run(client: Client, args: argparse.Namespace, out: dict[str, Any]) -> None:
    arguments = json.loads(args.args)
    created = creation_keys(await create(client, args, args.tool, arguments), out)
    if created is None:
        return
    modern = is_modern(client.session)
    task_id, interval = handle_id(created)
    out["polled"], out["final"], timed_out = await poll(client.session, modern, task_id, interval, args.timeout)
    if timed_out:
        out["timed_out"] = True
    if modern:
        final = out["final"]
        if "status" not in final:
            return
        if isinstance(final.get("result"), dict):
            try:
                out["result"] = dump(types.CallToolResult.model_validate(final["result"], by_name=False))
            except ValidationError as err:
                out["result"] = invalid(err)
        elif isinstance(final.get("error"), dict):
            out["result"] = {"error": final["error"]}
        return
    request = types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=task_id))
    # The payload arrives as the original request's result type (types.GetTaskPayloadResult keeps none of it).
    out["result"] = await answer(client.session.send_request(request, types.CallToolResult))


async def do_wait(client: Client, args: argparse.Namespace, out: dict[str, Any], task_id: str) -> None:
    """Poll a task made elsewhere (maybe through another server) to its end, then its result."""
    modern = is_modern(client.session)
    out["polled"], out["final"], timed_out = await poll(client.session, modern, task_id, None, args.timeout)
    if timed_out:
        out["timed_out"] = True
    if modern:
        if isinstance(out["final"].get("result"), dict):
            out["result"] = out["final"]["result"]
        return
    request = types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=task_id))
    out["result"] = await answer(client.session.send_request(request, types.CallToolResult))


async def do_transparent(client: Client, ext: TasksExtension, args: argparse.Namespace, out: dict[str, Any]) -> None:
    try:
        out["result"] = dump(await client.call_tool(args.tool, json.loads(args.args)))
    except MCPError as err:
        out["result"] = {"error": error_of(err)}
    except ValidationError as err:
        out["result"] = invalid(err)
    except TaskNotCompleted as err:
        out["result"] = {"error": {"code": None, "message": str(err)}}
    out["created"] = ext.created
    out["polled"] = ext.polled
    out["final"] = ext.final
    if ext.timed_out:
        out["timed_out"] = True


async def do_cancel(client: Client, args: argparse.Namespace, out: dict[str, Any]) -> None:
    created = creation_keys(await create(client, args, args.tool, json.loads(args.args)), out)
    if created is None:
        return
    modern = is_modern(client.session)
    task_id, interval = handle_id(created)
    out["cancel"] = await cancel_task(client.session, modern, task_id)
    out["polled"], out["final"], timed_out = await poll(client.session, modern, task_id, interval, args.timeout)
    if timed_out:
        out["timed_out"] = True


async def do_flood(client: Client, args: argparse.Namespace, out: dict[str, Any]) -> None:
    arguments = json.loads(args.args)
    gate = asyncio.Semaphore(args.concurrency)
    counts = {"created": 0, "other": 0}
    errors: dict[str, int] = {}

    async def one() -> None:
        async with gate:
            try:
                made = await create(client, args, args.tool, arguments)
            except Exception as err:  # noqa: BLE001 - count whatever a request ends in
                made = {"error": {"code": type(err).__name__, "message": str(err)}}
        if "created" in made:
            counts["created"] += 1
        elif "plain" in made:
            counts["other"] += 1
        else:
            key = f"{made['error']['code']} {str(made['error']['message'])[:120]}"
            errors[key] = errors.get(key, 0) + 1

    await asyncio.gather(*(one() for _ in range(args.flood)))
    out["created"] = counts["created"]
    out["errors"] = errors
    out["other"] = counts["other"]
    if args.after:
        out["after"] = await answer(client.call_tool(args.after, json.loads(args.after_args)))


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
        ext = TasksExtension(args.timeout)
        client = await stack.enter_async_context(
            Client(server, mode=args.mode, read_timeout_seconds=args.timeout, cache=None, extensions=[ext])
        )
        out: dict[str, Any] = {"protocol_version": client.protocol_version}
        # Listed first, as an SDK client would: a 2026-07-28 call mirrors the
        # tool's x-mcp-header arguments only for a listed tool.
        await client.list_tools()
        if args.run and args.transparent:
            await do_transparent(client, ext, args, out)
        elif args.run:
            await do_run(client, args, out)
        elif args.cancel:
            await do_cancel(client, args, out)
        elif args.flood is not None:
            await do_flood(client, args, out)
        elif args.list:
            out["list"] = await answer(client.session.send_request(types.ListTasksRequest(), types.ListTasksResult))
        elif args.get is not None:
            out["get"] = await get_task(client.session, is_modern(client.session), args.get)
        elif args.create:
            creation_keys(await create(client, args, args.tool, json.loads(args.args)), out)
        elif args.wait is not None:
            await do_wait(client, args, out, args.wait)
        elif args.cancel_id is not None:
            out["cancel"] = await cancel_task(client.session, is_modern(client.session), args.cancel_id)
            out["get"] = await get_task(client.session, is_modern(client.session), args.cancel_id)
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
        print(f"py_tasks: {message}", file=sys.stderr)
        print(json.dumps({"error": {"code": None, "message": message}}))
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
