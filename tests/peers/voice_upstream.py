#!/usr/bin/env python3
"""A scripted upstream voice API: OpenAI Realtime (GA) or Gemini Live.

It stands in for the real services, which the tests cannot reach. It replays
the documented event sequences and checks every client message against the
documented shapes (openai 3.57 `types/realtime/`, google-genai 3.6.1
`types.py`), so a malformed `session.update`, `function_call_output`, `setup`
or `toolResponse` fails the test.

  voice_upstream.py --format openai|gemini --log LOG.jsonl
                    [--scenario SCENARIO.json] [--hostile flood|huge|close|stall|noread|calls]

Binds 127.0.0.1:0 (plain ws), prints `listening on 127.0.0.1:PORT` as its first
stdout line, serves any path until SIGTERM/SIGINT (exit 0). LOG gets one JSON
object per line:

  {"conn": N, "connect": {"path", "query", "headers"}}   each connection (query:
        {name: value}; headers: authorization, x-goog-api-key, openai-beta if sent)
  {"conn": N, "dir": "in"|"out", "event": {...}}        each message (a message
        over 64 KiB is logged as {"summary": {"bytes", "type" or "keys"}}; a
        flood as one {"summary": {"flood": COUNT, ...}})
  {"conn": N, "error": "..."}    a validation failure: the connection is then
                                 closed with 1008 and that reason (120 bytes)
  {"conn": N, "note": "..."}     what the model chose, e.g. not to call an
                                 undeclared tool
  {"conn": N, "tool_response": {"id", "name", "scheduling", "behavior"}}  (gemini)

Audio: the bytes of the audio are "transcribed" by reading them as UTF-8
text. OpenAI: one transcript per `input_audio_buffer.commit`, answered at once
while `audio.input.turn_detection` has its default (server VAD, create_response
true; the API's default too), else at the next `response.create`, like a
`message` item. Gemini: each `realtimeInput` audio message is one whole
utterance; a `clientContent` with `turnComplete` is answered at once.

SCENARIO.json: {"calls": {"<transcript>": {"name": TOOL, "arguments": {...}}}}.
After that transcript the model calls TOOL, once TOOL is declared on the
session (it waits up to 5 s for a session.update / setup declaring it; else it
notes "model did not call undeclared tool TOOL" and answers with text). The
tool's output is answered with "The tool said: <output>" (Gemini: the
response's "output", or the whole response as JSON); other transcripts with
"You said: <transcript>". With "force": true the model calls TOOL at once,
declared or not (a confused or hostile model: the relay must answer such a
call as an unknown tool).

Gemini messages may name fields by their proto names (`realtime_input`,
`mime_type`), as the API accepts and google-genai sends. A `scheduling` on
the response of a function not declared NON_BLOCKING is noted as ignored
(the API docs: "Only applicable to NON_BLOCKING function calls, is ignored
otherwise"); SILENT on a NON_BLOCKING one gets no answer.

Gemini sessions resume: with `sessionResumption` in the setup the server sends
a `sessionResumptionUpdate` after setupComplete and after each turnComplete; a
later connection whose setup carries an issued handle continues that session
(pending calls included) with the tools of its own setup.

Hostile modes (after the first event: session.created / setupComplete):
flood = 200,000 small valid events, then serve on; huge = one 100 MB
message; close = drop the TCP connection 0.5 s later without a close frame;
stall = accept the WebSocket and never send anything; noread (OpenAI) = send
session.created, then never read again (the socket's buffers fill, and the
relay's writes to it block), holding the connection until the relay drops it.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import itertools
import json
import re
import signal
import sys
from typing import Any, Callable
from urllib.parse import parse_qsl, urlsplit

from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

BIG = 64 * 1024  # messages larger than this are logged as a summary
FLOOD = 200_000
HUGE = 100_000_000
DECLARE_WAIT = 5.0
LOGGED_HEADERS = ("authorization", "x-goog-api-key", "openai-beta")


class Invalid(Exception):
    """A client message that does not match the documented shape."""


def check(ok: Any, message: str) -> None:
    if not ok:
        raise Invalid(message)


def only_keys(obj: Any, where: str, allowed: set[str], required: set[str] = frozenset()) -> dict:
    check(isinstance(obj, dict), f"{where}: must be an object")
    unknown = sorted(set(obj) - allowed)
    check(not unknown, f"{where}: unknown field {unknown[0]!r}" if unknown else "")
    missing = sorted(required - set(obj))
    check(not missing, f"{where}: missing {missing[0]!r}" if missing else "")
    return obj


def is_b64(value: Any) -> bool:
    try:
        base64.b64decode(value, validate=True)
        return isinstance(value, str)
    except (binascii.Error, TypeError, ValueError):
        return False


def heard(audio: bytes | str) -> str:
    """The scripted "speech to text": the audio bytes (or base64) read as UTF-8 text."""
    if isinstance(audio, str):
        audio = base64.b64decode(audio)
    return audio.decode("utf-8", "replace").strip()


class Log:
    """The JSON-lines log, flushed after each line."""

    def __init__(self, path: str):
        self.file = open(path, "a", encoding="utf-8")

    def write(self, obj: dict) -> None:
        self.file.write(json.dumps(obj) + "\n")
        self.file.flush()


class Conn:
    """One WebSocket connection: logged sends, and its number."""

    def __init__(self, ws: ServerConnection, n: int, log: Log):
        self.ws, self.n, self.log = ws, n, log
        self.ids = itertools.count(1)
        self.lock = asyncio.Lock()

    def new_id(self, prefix: str) -> str:
        return f"{prefix}_{self.n}_{next(self.ids)}"

    def record(self, direction: str, raw: str, event: Any) -> None:
        if len(raw) > BIG:
            summary = {"bytes": len(raw)}
            if isinstance(event, dict):
                summary["type" if "type" in event else "keys"] = event.get("type") or sorted(event)
            event = {"summary": summary}
        self.log.write({"conn": self.n, "dir": direction, "event": event})

    def note(self, text: str) -> None:
        self.log.write({"conn": self.n, "note": text})

    async def send(self, event: dict) -> None:
        raw = json.dumps(event)
        async with self.lock:
            self.record("out", raw, event)
            await self.ws.send(raw)

    async def flood(self, make: Callable[[int], str], kind: str) -> None:
        """Sends FLOOD small events, logged as one summary line."""
        self.log.write({"conn": self.n, "dir": "out", "event": {"summary": {"flood": FLOOD, "type": kind}}})
        async with self.lock:
            for i in range(FLOOD):
                await self.ws.send(make(i))

    async def huge(self, event: dict, key_path: list) -> None:
        """Sends `event` with HUGE characters of padding at `key_path`."""
        target = event
        for key in key_path[:-1]:
            target = target[key]
        target[key_path[-1]] = "x" * HUGE
        await self.send(event)

    async def fail(self, reason: str) -> None:
        self.log.write({"conn": self.n, "error": reason})
        await self.ws.close(1008, reason.encode()[:120].decode("utf-8", "ignore"))

    async def messages(self):
        """Yields each client message parsed; raises Invalid for non-JSON."""
        async for raw in self.ws:
            text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
            try:
                event = json.loads(text)
            except ValueError:
                self.record("in", text, {"unparsed": text[:200]})
                raise Invalid("message is not JSON")
            self.record("in", text, event)
            yield event


def spawn(tasks: set[asyncio.Task], coro) -> None:
    """Runs `coro` as a task kept in `tasks`; a connection closed under it is no error."""
    def done(task: asyncio.Task) -> None:
        tasks.discard(task)
        error = None if task.cancelled() else task.exception()
        if error and not isinstance(error, ConnectionClosed):
            task.get_loop().call_exception_handler({"message": "voice_upstream: a reply failed",
                                                    "exception": error, "task": task})
    task = asyncio.create_task(coro)
    tasks.add(task)
    task.add_done_callback(done)


async def wait_declared(cond: asyncio.Condition, declared: Callable[[], dict], name: str) -> bool:
    async with cond:
        try:
            await asyncio.wait_for(cond.wait_for(lambda: name in declared()), DECLARE_WAIT)
            return True
        except asyncio.TimeoutError:
            return False


# --- OpenAI Realtime ---------------------------------------------------------

OPENAI_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
OPENAI_EVENTS = {  # type: (allowed fields besides type/event_id, required)
    "session.update": ({"session"}, {"session"}),
    "input_audio_buffer.append": ({"audio"}, {"audio"}),
    "input_audio_buffer.commit": (set(), set()),
    "input_audio_buffer.clear": (set(), set()),
    "conversation.item.create": ({"item", "previous_item_id"}, {"item"}),
    "conversation.item.delete": ({"item_id"}, {"item_id"}),
    "conversation.item.truncate": ({"item_id", "content_index", "audio_end_ms"},
                                   {"item_id", "content_index", "audio_end_ms"}),
    "response.create": ({"response"}, set()),
    "response.cancel": ({"response_id"}, set()),
}


def check_openai_tools(tools: Any) -> None:
    check(isinstance(tools, list), "session.tools: must be an array")
    names = set()
    for i, tool in enumerate(tools):
        where = f"session.tools[{i}]"
        check(isinstance(tool, dict), f"{where}: must be an object")
        if tool.get("type") == "mcp":
            check(isinstance(tool.get("server_label"), str), f"{where}.server_label: must be a string")
            continue
        only_keys(tool, where, {"type", "name", "description", "parameters"}, {"type", "name", "parameters"})
        check(tool["type"] == "function", f"{where}.type: must be 'function' or 'mcp'")
        check(isinstance(tool["name"], str) and OPENAI_NAME.match(tool["name"]),
              f"{where}.name: must match ^[a-zA-Z0-9_-]{{1,64}}$")
        check(tool["name"] not in names, f"{where}.name: {tool['name']!r} declared twice")
        names.add(tool["name"])
        check(isinstance(tool.get("description", ""), str), f"{where}.description: must be a string")
        params = tool["parameters"]
        check(isinstance(params, dict) and params.get("type") == "object",
              f"{where}.parameters: must be a JSON Schema with type 'object'")


def check_openai(event: Any) -> dict:
    check(isinstance(event, dict) and isinstance(event.get("type"), str), "event: needs a string 'type'")
    kind = event["type"]
    check(kind in OPENAI_EVENTS, f"unknown client event type {kind!r}")
    allowed, required = OPENAI_EVENTS[kind]
    only_keys(event, kind, allowed | {"type", "event_id"}, required)
    check(isinstance(event.get("event_id", ""), str), f"{kind}.event_id: must be a string")
    if kind == "session.update":
        session = event["session"]
        check(isinstance(session, dict) and session.get("type") == "realtime",
              "session.update: session.type must be 'realtime'")
        if "tools" in session:
            check_openai_tools(session["tools"])
        if "tool_choice" in session:
            choice = session["tool_choice"]
            check(choice in ("auto", "none", "required")
                  or (isinstance(choice, dict) and choice.get("type") in ("function", "mcp")),
                  "session.tool_choice: must be auto|none|required or a function/mcp choice")
    elif kind == "input_audio_buffer.append":
        check(is_b64(event["audio"]), "input_audio_buffer.append.audio: must be base64")
    elif kind == "conversation.item.create":
        check(isinstance(event.get("previous_item_id", ""), str), "previous_item_id: must be a string")
        item = event["item"]
        check(isinstance(item, dict), "conversation.item.create.item: must be an object")
        if item.get("type") == "function_call_output":
            only_keys(item, "item", {"type", "call_id", "output", "id", "object", "status"}, {"call_id", "output"})
            check(isinstance(item["call_id"], str), "item.call_id: must be a string")
            check(isinstance(item["output"], str), "item.output: must be a string")
        elif item.get("type") == "message":
            check(item.get("role") in ("user", "assistant", "system"), "item.role: must be user|assistant|system")
            check(isinstance(item.get("content"), list) and all(
                isinstance(p, dict) and isinstance(p.get("type"), str) for p in item["content"]),
                "item.content: must be an array of typed parts")
        else:
            check(item.get("type") == "function_call", f"item.type: unsupported {item.get('type')!r}")
    elif kind in ("conversation.item.delete", "conversation.item.truncate"):
        check(isinstance(event["item_id"], str), f"{kind}.item_id: must be a string")
    elif kind == "response.create":
        check(isinstance(event.get("response", {}), dict), "response.create.response: must be an object")
    return event


def merge(into: dict, update: dict) -> None:
    """Applies a session.update: only the given fields change, objects merge."""
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge(into[key], value)
        else:
            into[key] = value


class OpenAISession:
    """One Realtime connection and its conversation."""

    def __init__(self, conn: Conn, scenario: dict, model: str):
        self.conn, self.scenario = conn, scenario
        self.session = {"type": "realtime", "object": "realtime.session", "id": conn.new_id("sess"),
                        "model": model, "output_modalities": ["audio"], "instructions": "",
                        "tools": [], "tool_choice": "auto", "max_output_tokens": "inf",
                        "audio": {"input": {"turn_detection": {"type": "server_vad", "create_response": True}}}}
        self.audio = b""
        self.last_item: str | None = None
        self.pending_calls: dict[str, str] = {}  # call_id -> name, not yet answered
        self.outputs: list[str] = []  # function outputs awaiting response.create
        self.user_texts: list[str] = []  # message items awaiting response.create
        self.declared_changed = asyncio.Condition()
        self.responding = asyncio.Lock()
        self.tasks: set[asyncio.Task] = set()

    def declared(self) -> dict:
        return {t["name"]: t for t in self.session.get("tools", []) if t.get("type") == "function"}

    def ev(self, kind: str, **fields) -> dict:
        return {"type": kind, "event_id": self.conn.new_id("event"), **fields}

    async def handle(self, event: dict) -> None:
        kind = event["type"]
        if kind == "session.update":
            async with self.declared_changed:
                merge(self.session, event["session"])
                self.declared_changed.notify_all()
            await self.conn.send(self.ev("session.updated", session=self.session))
        elif kind == "input_audio_buffer.append":
            self.audio += base64.b64decode(event["audio"])
        elif kind == "input_audio_buffer.clear":
            self.audio = b""
            await self.conn.send(self.ev("input_audio_buffer.cleared"))
        elif kind == "input_audio_buffer.commit":
            await self.commit()
        elif kind == "conversation.item.create":
            await self.item_create(event)
        elif kind == "response.create":
            spawn(self.tasks, self.respond_to_create())
        elif kind == "conversation.item.delete":
            await self.conn.send(self.ev("conversation.item.deleted", item_id=event["item_id"]))
        # conversation.item.truncate and response.cancel: accepted, nothing to do.

    async def commit(self) -> None:
        if not self.audio:
            self.conn.note("commit with an empty audio buffer")
            await self.conn.send(self.ev("error", error={
                "type": "invalid_request_error", "code": "input_audio_buffer_commit_empty",
                "message": "Error committing input audio buffer: the buffer is empty."}))
            return
        transcript, self.audio = heard(self.audio), b""
        item_id = self.conn.new_id("item")
        await self.conn.send(self.ev("input_audio_buffer.committed", item_id=item_id,
                                     previous_item_id=self.last_item))
        self.last_item = item_id
        await self.conn.send(self.ev("conversation.item.input_audio_transcription.completed",
                                     item_id=item_id, content_index=0, transcript=transcript,
                                     usage={"type": "duration", "seconds": 1}))
        turn_detection = ((self.session.get("audio") or {}).get("input") or {}).get("turn_detection")
        if turn_detection and turn_detection.get("create_response", True):
            spawn(self.tasks, self.answer(transcript))
        else:  # no VAD response: the client asks with response.create
            self.user_texts.append(transcript)

    async def item_create(self, event: dict) -> None:
        item = dict(event["item"])
        if item["type"] == "function_call_output":
            if item["call_id"] not in self.pending_calls:
                raise Invalid(f"function_call_output: call_id {item['call_id']!r} is not a pending call")
            del self.pending_calls[item["call_id"]]
            self.outputs.append(item["output"])
        elif item["type"] == "message" and item["role"] == "user":
            text = " ".join(p.get("text", "") for p in item["content"] if p["type"] == "input_text")
            self.user_texts.append(text.strip())
        item.setdefault("id", self.conn.new_id("item"))
        item.update(object="realtime.item", status="completed")
        await self.conn.send(self.ev("conversation.item.added", previous_item_id=self.last_item, item=item))
        await self.conn.send(self.ev("conversation.item.done", previous_item_id=self.last_item, item=item))
        self.last_item = item["id"]

    async def respond_to_create(self) -> None:
        if self.outputs:
            outputs, self.outputs = self.outputs, []
            await self.text_response("The tool said: " + " ".join(outputs))
        elif self.user_texts:
            await self.answer(self.user_texts.pop(0))
        else:
            await self.text_response("How can I help?")

    async def answer(self, transcript: str) -> None:
        call = self.scenario.get(transcript)
        if call and self.session.get("tool_choice") == "none":
            self.conn.note(f"model did not call {call['name']}: tool_choice is none")
        elif call and (call.get("force") or await wait_declared(self.declared_changed, self.declared, call["name"])):
            return await self.call_response(call)
        elif call:
            self.conn.note(f"model did not call undeclared tool {call['name']}")
        await self.text_response(f"You said: {transcript}")

    async def call_response(self, call: dict) -> None:
        async with self.responding:
            rid, item_id, call_id = self.conn.new_id("resp"), self.conn.new_id("item"), self.conn.new_id("call")
            args = json.dumps(call.get("arguments", {}))
            item = {"id": item_id, "object": "realtime.item", "type": "function_call", "status": "in_progress",
                    "call_id": call_id, "name": call["name"], "arguments": ""}
            ids = {"response_id": rid, "item_id": item_id, "output_index": 0, "call_id": call_id}
            self.pending_calls[call_id] = call["name"]
            send, ev = self.conn.send, self.ev
            await send(ev("response.created", response={"id": rid, "object": "realtime.response",
                                                         "status": "in_progress", "output": []}))
            await send(ev("response.output_item.added", response_id=rid, output_index=0, item=item))
            half = len(args) // 2
            for delta in (args[:half], args[half:]):
                await send(ev("response.function_call_arguments.delta", delta=delta, **ids))
            await send(ev("response.function_call_arguments.done", name=call["name"], arguments=args, **ids))
            item = {**item, "status": "completed", "arguments": args}
            await send(ev("response.output_item.done", response_id=rid, output_index=0, item=item))
            await send(ev("response.done", response={"id": rid, "object": "realtime.response",
                                                      "status": "completed", "output": [item]}))
            self.last_item = item_id

    async def text_response(self, text: str) -> None:
        async with self.responding:
            rid, item_id = self.conn.new_id("resp"), self.conn.new_id("item")
            item = {"id": item_id, "object": "realtime.item", "type": "message", "role": "assistant",
                    "status": "in_progress", "content": []}
            ids = {"response_id": rid, "item_id": item_id, "output_index": 0, "content_index": 0}
            send, ev = self.conn.send, self.ev
            await send(ev("response.created", response={"id": rid, "object": "realtime.response",
                                                         "status": "in_progress", "output": []}))
            await send(ev("response.output_item.added", response_id=rid, output_index=0, item=item))
            await send(ev("response.output_text.delta", delta=text, **ids))
            await send(ev("response.output_text.done", text=text, **ids))
            item = {**item, "status": "completed", "content": [{"type": "output_text", "text": text}]}
            await send(ev("response.output_item.done", response_id=rid, output_index=0, item=item))
            await send(ev("response.done", response={"id": rid, "object": "realtime.response",
                                                      "status": "completed", "output": [item]}))
            self.last_item = item_id

    async def hostile(self, mode: str) -> None:
        if mode == "flood":
            template = json.dumps({"type": "rate_limits.updated", "event_id": "EVENT_ID", "rate_limits": [
                {"name": "requests", "limit": 1000, "remaining": 999, "reset_seconds": 1.0}]})
            await self.conn.flood(lambda i: template.replace("EVENT_ID", f"flood_{i}", 1), "rate_limits.updated")
        elif mode == "huge":
            event = self.ev("response.output_text.delta", response_id="resp_huge", item_id="item_huge",
                            output_index=0, content_index=0, delta="")
            await self.conn.huge(event, ["delta"])
        elif mode == "calls":
            # A hundred function calls at once, each a 700 ms sleep.
            for i in range(100):
                await self.conn.send(self.ev("response.function_call_arguments.done", response_id="resp_calls",
                                             item_id=f"item_call_{i}", output_index=i, call_id=f"call_many_{i}",
                                             name="sleep", arguments=json.dumps({"ms": 700})))

    async def run(self, hostile: str | None) -> None:
        await self.conn.send(self.ev("session.created", session=self.session))
        if hostile == "noread":
            # websockets stops reading the socket once max_queue frames wait.
            self.conn.note("reading nothing from now on")
            await asyncio.Event().wait()
        await hostile_start(self.conn, hostile, self.hostile)
        try:
            async for event in self.conn.messages():
                await self.handle(check_openai(event))
        finally:
            for task in list(self.tasks):
                task.cancel()


# --- Gemini Live -------------------------------------------------------------

GEMINI_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]{0,127}$")
GEMINI_SETUP = {"model", "generationConfig", "systemInstruction", "tools", "sessionResumption",
                "contextWindowCompression", "inputAudioTranscription", "outputAudioTranscription",
                "proactivity", "explicitVadSignal", "historyConfig", "avatarConfig", "safetySettings",
                "labels", "realtimeInputConfig"}
GEMINI_TOOL = {"functionDeclarations", "googleSearch", "googleSearchRetrieval", "codeExecution", "urlContext",
               "computerUse", "fileSearch", "googleMaps", "retrieval", "mcpServers"}
GEMINI_FUNCTION = {"name", "description", "parameters", "parametersJsonSchema", "response",
                   "responseJsonSchema", "behavior"}
# The Gemini Developer API's Schema (OpenAPI subset; additionalProperties,
# $ref and $defs are Vertex-only, see google-genai _transformers.py).
GEMINI_SCHEMA = {"type", "format", "title", "description", "nullable", "enum", "maxItems", "minItems",
                 "properties", "required", "minProperties", "maxProperties", "minLength", "maxLength",
                 "pattern", "example", "anyOf", "propertyOrdering", "default", "items", "minimum", "maximum"}
GEMINI_TYPES = {"TYPE_UNSPECIFIED", "STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT", "NULL"}
GEMINI_GENERATION = {"candidateCount", "maxOutputTokens", "temperature", "topP", "topK", "presencePenalty",
                     "frequencyPenalty", "responseModalities", "speechConfig", "mediaResolution", "seed",
                     "enableAffectiveDialog", "thinkingConfig", "translationConfig"}
SCHEDULING = {"SCHEDULING_UNSPECIFIED", "SILENT", "WHEN_IDLE", "INTERRUPT"}


def fields(obj: Any, where: str, allowed: set[str], required: set[str] = frozenset()) -> dict:
    """A proto message's fields under their JSON names, checked like only_keys.

    The API parses proto3 JSON, which accepts a field's proto name as well as
    its JSON name (`mime_type` or `mimeType`); google-genai sends both kinds.
    Map keys and Struct fields (`properties`, `args`, `response`) are data and
    are left alone by the callers.
    """
    check(isinstance(obj, dict), f"{where}: must be an object")
    out = {}
    for key, value in obj.items():
        head, *rest = key.split("_")
        out[head + "".join(p[:1].upper() + p[1:] for p in rest)] = value
    return only_keys(out, where, allowed, required)


def check_schema(schema: Any, where: str) -> dict:
    schema = fields(schema, where, GEMINI_SCHEMA)
    if "type" in schema:
        check(schema["type"] in GEMINI_TYPES, f"{where}.type: {schema['type']!r} is not one of the UPPERCASE types")
    props = schema.get("properties", {})
    check(isinstance(props, dict), f"{where}.properties: must be an object")
    schema["properties"] = {name: check_schema(sub, f"{where}.properties.{name}") for name, sub in props.items()}
    if "items" in schema:
        schema["items"] = check_schema(schema["items"], f"{where}.items")
    if "anyOf" in schema:
        check(isinstance(schema["anyOf"], list), f"{where}.anyOf: must be an array")
        schema["anyOf"] = [check_schema(sub, f"{where}.anyOf[{i}]") for i, sub in enumerate(schema["anyOf"])]
    return schema


def check_declaration(decl: Any, where: str, names: set[str]) -> dict:
    decl = fields(decl, where, GEMINI_FUNCTION, {"name"})
    check(isinstance(decl["name"], str) and GEMINI_NAME.match(decl["name"]),
          f"{where}.name: must match ^[A-Za-z_][A-Za-z0-9_.:-]{{0,127}}$")
    check(decl["name"] not in names, f"{where}.name: {decl['name']!r} declared twice")
    names.add(decl["name"])
    check(isinstance(decl.get("description", ""), str), f"{where}.description: must be a string")
    check(not ("parameters" in decl and "parametersJsonSchema" in decl),
          f"{where}: parameters and parametersJsonSchema are mutually exclusive")
    if "parameters" in decl:
        decl["parameters"] = check_schema(decl["parameters"], f"{where}.parameters")
    if "parametersJsonSchema" in decl:
        check(isinstance(decl["parametersJsonSchema"], dict) and decl["parametersJsonSchema"].get("type") == "object",
              f"{where}.parametersJsonSchema: must be a JSON Schema with type 'object'")
    check(decl.get("behavior", "BLOCKING") in ("BLOCKING", "NON_BLOCKING", "UNSPECIFIED"),
          f"{where}.behavior: must be BLOCKING|NON_BLOCKING")
    return decl


def check_setup(setup: Any) -> dict:
    """The setup, checked, with its fields (and its tools') under JSON names."""
    setup = fields(setup, "setup", GEMINI_SETUP, {"model"})
    check(isinstance(setup["model"], str) and setup["model"].startswith("models/"),
          "setup.model: must be a string 'models/...'")
    for key in ("inputAudioTranscription", "outputAudioTranscription", "realtimeInputConfig",
                "contextWindowCompression"):
        check(isinstance(setup.get(key, {}), dict), f"setup.{key}: must be an object")
    generation = fields(setup.get("generationConfig", {}), "setup.generationConfig", GEMINI_GENERATION)
    modalities = generation.get("responseModalities", [])
    check(isinstance(modalities, list) and set(modalities) <= {"TEXT", "AUDIO"},
          "setup.generationConfig.responseModalities: must be an array of TEXT|AUDIO")
    if "systemInstruction" in setup:
        fields(setup["systemInstruction"], "setup.systemInstruction", {"parts", "role"}, {"parts"})
    resumption = fields(setup.get("sessionResumption", {}), "setup.sessionResumption", {"handle", "transparent"})
    check(isinstance(resumption.get("handle", ""), str), "setup.sessionResumption.handle: must be a string")
    setup["sessionResumption"] = resumption if "sessionResumption" in setup else None
    tools = setup.get("tools", [])
    check(isinstance(tools, list), "setup.tools: must be an array")
    names: set[str] = set()
    setup["tools"] = []
    for i, tool in enumerate(tools):
        tool = fields(tool, f"setup.tools[{i}]", GEMINI_TOOL)
        decls = tool.get("functionDeclarations", [])
        check(isinstance(decls, list), f"setup.tools[{i}].functionDeclarations: must be an array")
        tool["functionDeclarations"] = [check_declaration(d, f"setup.tools[{i}].functionDeclarations[{j}]", names)
                                        for j, d in enumerate(decls)]
        setup["tools"].append(tool)
    return setup


def check_blob(blob: Any, where: str) -> str:
    blob = fields(blob, where, {"data", "mimeType"}, {"data", "mimeType"})
    check(is_b64(blob["data"]), f"{where}.data: must be base64")
    check(isinstance(blob["mimeType"], str) and blob["mimeType"].startswith("audio/pcm"),
          f"{where}.mimeType: must be audio/pcm[;rate=N]")
    return blob["data"]


class GeminiSession:
    """One Live session: survives its connection when resumable."""

    handles: dict[str, GeminiSession] = {}
    counter = itertools.count(1)

    def __init__(self, scenario: dict):
        self.scenario = scenario
        self.n = next(self.counter)
        self.conn: Conn | None = None
        self.tools: dict[str, dict] = {}
        self.resumable = False
        self.pending_calls: dict[str, str] = {}  # id -> name
        self.declared_changed = asyncio.Condition()
        self.responding = asyncio.Lock()

    async def attach(self, conn: Conn, setup: dict) -> None:
        """Makes `conn` this session's connection, with `setup`'s tools."""
        async with self.declared_changed:
            self.conn = conn
            self.resumable = setup["sessionResumption"] is not None
            self.tools = {d["name"]: d for t in setup.get("tools", []) for d in t.get("functionDeclarations", [])}
            self.declared_changed.notify_all()
        await conn.send({"setupComplete": {}})
        await self.resumption_update()

    async def resumption_update(self) -> None:
        if self.resumable and self.conn:
            handle = f"handle_{self.n}_{next(self.counter)}"
            GeminiSession.handles[handle] = self
            await self.conn.send({"sessionResumptionUpdate": {"newHandle": handle, "resumable": True}})

    async def send(self, message: dict) -> None:
        """Sends on the session's current connection (which may have changed)."""
        try:
            await self.conn.send(message)
        except ConnectionClosed:
            self.conn.note(f"connection gone, not sent: {sorted(message)}")

    async def model_text(self, text: str) -> None:
        await self.send({"serverContent": {"modelTurn": {"role": "model", "parts": [{"text": text}]}}})
        await self.send({"serverContent": {"turnComplete": True}})
        await self.resumption_update()

    async def answer(self, transcript: str) -> None:
        async with self.responding:
            call = self.scenario.get(transcript)
            if call and (call.get("force") or await wait_declared(self.declared_changed, lambda: self.tools, call["name"])):
                call_id = f"fc_{self.n}_{next(self.counter)}"
                self.pending_calls[call_id] = call["name"]
                behavior = self.tools.get(call["name"], {}).get("behavior", "BLOCKING")
                self.conn.note(f"model calls {call['name']} ({behavior})")
                await self.send({"toolCall": {"functionCalls": [
                    {"id": call_id, "name": call["name"], "args": call.get("arguments", {})}]}})
                return
            if call:
                self.conn.note(f"model did not call undeclared tool {call['name']}")
            await self.model_text(f"You said: {transcript}")

    def tool_response(self, conn: Conn, message: Any) -> str | None:
        """Checks a toolResponse; returns what the model then says, if anything."""
        message = fields(message, "toolResponse", {"functionResponses"}, {"functionResponses"})
        responses = message["functionResponses"]
        check(isinstance(responses, list) and responses, "toolResponse.functionResponses: must be a non-empty array")
        outputs = []
        for i, fr in enumerate(responses):
            where = f"toolResponse.functionResponses[{i}]"
            fr = fields(fr, where, {"id", "name", "response", "scheduling", "willContinue", "parts"},
                        {"id", "name", "response"})
            check(fr["id"] in self.pending_calls, f"{where}.id: {fr['id']!r} is not a pending call")
            check(fr["name"] == self.pending_calls[fr["id"]],
                  f"{where}.name: {fr['name']!r} does not match the call's {self.pending_calls[fr['id']]!r}")
            check(isinstance(fr["response"], dict), f"{where}.response: must be an object")
            scheduling = fr.get("scheduling")
            check(scheduling in SCHEDULING or scheduling is None, f"{where}.scheduling: unknown value {scheduling!r}")
            behavior = self.tools.get(fr["name"], {}).get("behavior", "BLOCKING")
            conn.log.write({"conn": conn.n, "tool_response": {"id": fr["id"], "name": fr["name"],
                                                               "scheduling": scheduling, "behavior": behavior}})
            del self.pending_calls[fr["id"]]
            if scheduling and behavior != "NON_BLOCKING":  # the API docs: "is ignored otherwise"
                conn.note(f"scheduling {scheduling} ignored: {fr['name']} is not NON_BLOCKING")
            elif scheduling == "SILENT":
                conn.note(f"SILENT response for {fr['name']}: added to the context, no generation")
                continue
            out = fr["response"].get("output", fr["response"])
            outputs.append(out if isinstance(out, str) else json.dumps(out, sort_keys=True))
        return "The tool said: " + " ".join(outputs) if outputs else None

    async def reply(self, text: str) -> None:
        async with self.responding:
            await self.model_text(text)


async def gemini_utterance(conn: Conn, kind: str, body: Any) -> str | None:
    """The user's utterance in a realtimeInput or clientContent message, if any."""
    if kind == "realtimeInput":
        body = fields(body, "realtimeInput", {"mediaChunks", "audio", "audioStreamEnd", "video", "text",
                                              "activityStart", "activityEnd"})
        chunks = [check_blob(body["audio"], "realtimeInput.audio")] if "audio" in body else []
        check(isinstance(body.get("mediaChunks", []), list), "realtimeInput.mediaChunks: must be an array")
        chunks += [check_blob(b, f"realtimeInput.mediaChunks[{i}]") for i, b in enumerate(body.get("mediaChunks", []))]
        check(isinstance(body.get("audioStreamEnd", True), bool), "realtimeInput.audioStreamEnd: must be a bool")
        check(isinstance(body.get("text", ""), str), "realtimeInput.text: must be a string")
        if chunks:
            utterance = " ".join(heard(c) for c in chunks)
            await conn.send({"serverContent": {"inputTranscription": {"text": utterance}}})
            return utterance
        return body.get("text")
    body = fields(body, "clientContent", {"turns", "turnComplete"})
    turns = body.get("turns", [])
    check(isinstance(turns, list), "clientContent.turns: must be an array")
    turns = [fields(t, f"clientContent.turns[{i}]", {"parts", "role"}, {"parts"}) for i, t in enumerate(turns)]
    text = " ".join(p.get("text", "") for t in turns for p in t["parts"] if isinstance(p, dict))
    return text.strip() if body.get("turnComplete") else None


async def gemini_connection(conn: Conn, scenario: dict, hostile: str | None) -> None:
    messages = conn.messages()
    first = await anext(messages, None)
    if first is None:
        return
    if hostile == "stall":
        return await hostile_start(conn, hostile, None, messages)
    setup = check_setup(fields(first, "first message", {"setup"}, {"setup"})["setup"])
    handle = (setup["sessionResumption"] or {}).get("handle")
    if handle:
        check(handle in GeminiSession.handles, f"setup.sessionResumption.handle: unknown handle {handle!r}")
        session = GeminiSession.handles[handle]
        conn.note(f"resumes session {session.n}")
    else:
        session = GeminiSession(scenario)
    await session.attach(conn, setup)

    async def flood_or_huge(mode: str) -> None:
        if mode == "flood":
            raw = json.dumps({"serverContent": {"modelTurn": {"role": "model", "parts": [{"text": "."}]}}})
            await conn.flood(lambda i: raw, "serverContent")
        elif mode == "huge":
            await conn.huge({"serverContent": {"modelTurn": {"role": "model", "parts": [{"text": ""}]}}},
                            ["serverContent", "modelTurn", "parts", 0, "text"])

    await hostile_start(conn, hostile, flood_or_huge)
    tasks: set[asyncio.Task] = set()
    async for message in messages:
        message = fields(message, "client message", {"setup", "clientContent", "realtimeInput", "toolResponse"})
        check(len(message) == 1, "a client message must have exactly one field")
        (kind, body), = message.items()
        check(kind != "setup", "setup: only the first message may be a setup")
        if kind == "toolResponse":
            if (text := session.tool_response(conn, body)) is not None:
                spawn(tasks, session.reply(text))
        elif (utterance := await gemini_utterance(conn, kind, body)) is not None:
            spawn(tasks, session.answer(utterance))


# --- serving -----------------------------------------------------------------

async def hostile_start(conn: Conn, mode: str | None, send_bad, messages=None) -> None:
    """Starts the hostile behaviour `mode` after the first event."""
    if mode in ("flood", "huge", "calls"):
        await send_bad(mode)
    elif mode == "close":
        await asyncio.sleep(0.5)
        conn.note("dropping the TCP connection")
        conn.ws.transport.abort()
    elif mode == "stall":
        async for _ in messages or conn.messages():
            pass


class Upstream:
    def __init__(self, fmt: str, log: Log, scenario: dict, hostile: str | None):
        self.fmt, self.log, self.scenario, self.hostile = fmt, log, scenario, hostile
        self.counter = itertools.count(1)

    async def handler(self, ws: ServerConnection) -> None:
        conn = Conn(ws, next(self.counter), self.log)
        url = urlsplit(ws.request.path)
        query = dict(parse_qsl(url.query, keep_blank_values=True))
        headers = {h: ws.request.headers[h] for h in LOGGED_HEADERS if h in ws.request.headers}
        self.log.write({"conn": conn.n, "connect": {"path": url.path, "query": query, "headers": headers}})
        try:
            if self.fmt == "openai":
                if self.hostile == "stall":
                    return await hostile_start(conn, "stall", None)
                session = OpenAISession(conn, self.scenario, query.get("model", "gpt-realtime"))
                await session.run(self.hostile)
            else:
                await gemini_connection(conn, self.scenario, self.hostile)
        except Invalid as err:
            await conn.fail(str(err))
        except ConnectionClosed:
            pass
        except Exception as err:
            self.log.write({"conn": conn.n, "error": f"upstream bug: {type(err).__name__}: {err}"})
            raise


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--format", required=True, choices=["openai", "gemini"])
    parser.add_argument("--log", required=True, help="JSON-lines log file (appended to)")
    parser.add_argument("--scenario", help='JSON: {"calls": {"<transcript>": {"name", "arguments"}}}')
    parser.add_argument("--hostile", choices=["flood", "huge", "close", "stall", "noread", "calls"])
    args = parser.parse_args()
    scenario = {}
    if args.scenario:
        with open(args.scenario, encoding="utf-8") as f:
            scenario = json.load(f).get("calls", {})
    upstream = Upstream(args.format, Log(args.log), scenario, args.hostile)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with serve(upstream.handler, "127.0.0.1", 0, max_size=None, compression=None,
                     ping_interval=None, close_timeout=1) as server:
        port = server.sockets[0].getsockname()[1]
        print(f"listening on 127.0.0.1:{port}", flush=True)
        await stop.wait()
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
