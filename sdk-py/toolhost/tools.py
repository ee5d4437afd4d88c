"""Declaring tools: ``@tool`` on a function, ``Plugin`` to export them.

::

    from toolhost import Plugin, invalid_input, tool

    @tool(description="Greets someone by name.", estimated_ms=1, max_ms=20, idempotent=True,
          schema={"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]})
    def greet(args):
        if not args["name"].strip():
            raise invalid_input("name must not be blank")
        return {"message": f"Hello, {args['name']}."}

    class Tool(Plugin):
        tools = [greet]

A tool function takes the arguments (a dict, already checked by the host
against ``schema``) and returns a JSON-able value (sent as a JSON content
block), a ``str`` (a text block) or a list of ``Content_*`` blocks. It
fails with ``raise invalid_input(...)``, ``not_found(...)``,
``forbidden(...)`` or ``failed(...)``; any other exception becomes a
``failed`` error naming the tool and the exception, never a crash.
"""

import difflib
import json
from typing import Any, Callable, Dict, List, Optional

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports.types import (
    Content_Json,
    Content_Text,
    ToolError_Failed,
    ToolError_Forbidden,
    ToolError_InvalidInput,
    ToolError_NotFound,
    ToolInfo,
)

__all__ = ["Plugin", "failed", "forbidden", "invalid_input", "not_found", "tool"]


def invalid_input(message: str) -> Err:
    """The arguments are wrong: say what was wrong and what would be right."""
    return Err(ToolError_InvalidInput(message))


def not_found(message: str) -> Err:
    """What the arguments name does not exist."""
    return Err(ToolError_NotFound(message))


def forbidden(message: str) -> Err:
    """The tool may not do that."""
    return Err(ToolError_Forbidden(message))


def failed(message: str) -> Err:
    """The tool could not do it (an API down, a setting missing, ...)."""
    return Err(ToolError_Failed(message))


# The JSON Schema keywords an arguments schema may use at its top level.
_SCHEMA_KEYWORDS = (
    "$schema", "$id", "$ref", "$defs", "$comment", "definitions", "type", "title", "description", "properties",
    "required", "additionalProperties", "patternProperties", "propertyNames", "minProperties", "maxProperties",
    "dependentRequired", "dependentSchemas", "unevaluatedProperties", "allOf", "anyOf", "oneOf", "not", "if", "then",
    "else", "enum", "const", "default", "examples", "deprecated", "readOnly", "writeOnly",
)


def _check_schema(schema: Any, name: str) -> Dict[str, Any]:
    # Checked when the module loads, which is at build time: a typo fails
    # the build, not a call.
    if not isinstance(schema, dict):
        raise TypeError(f"tool {name}: schema must be a JSON Schema dict (type, properties, required...)")
    for key in schema:
        if key not in _SCHEMA_KEYWORDS:
            near = difflib.get_close_matches(key, _SCHEMA_KEYWORDS, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise TypeError(f"tool {name}: schema has an unknown keyword {key!r}{hint}")
    properties = schema.get("properties")
    for required in schema.get("required", []):
        if isinstance(properties, dict) and required not in properties:
            raise TypeError(f"tool {name}: schema 'required' names {required!r}, which is not in its properties "
                            f"({', '.join(properties)})")
    return schema


class _Tool:
    def __init__(self, fn: Callable[[Dict[str, Any]], Any], info: ToolInfo):
        self.fn = fn
        self.info = info
        self.__doc__ = fn.__doc__

    def __call__(self, args: Dict[str, Any]) -> Any:
        return self.fn(args)


def tool(*, description: str, schema: Dict[str, Any], estimated_ms: int, max_ms: int,
         idempotent: bool = False, cacheable_seconds: int = 0, name: Optional[str] = None,
         probe_arguments: Optional[Dict[str, Any]] = None) -> Callable[[Callable], _Tool]:
    """Declares a tool: its name (the function's by default), what the model
    reads (``description``, the JSON Schema of its arguments), and its
    declared latency in milliseconds (typical ``estimated_ms``, worst case
    ``max_ms``: the host places it in a latency tier by them and stops a
    call that runs past ``max_ms``). ``idempotent``: the same arguments give
    the same answer with no side effects. ``probe_arguments``: arguments the
    host may call it with to measure it (idempotent tools only)."""

    def wrap(fn: Callable) -> _Tool:
        tool_name = name or fn.__name__
        info = ToolInfo(
            name=tool_name,
            description=description,
            input_schema=json.dumps(_check_schema(schema, tool_name)),
            estimated_duration_ms=estimated_ms,
            max_duration_ms=max_ms,
            idempotent=idempotent,
            cacheable_seconds=cacheable_seconds,
            probe_arguments=json.dumps(probe_arguments) if probe_arguments is not None else None,
        )
        return _Tool(fn, info)

    return wrap


class Plugin(exports.Tool):
    """The component's `tool` export: subclass it as ``class Tool(Plugin)``
    in ``app.py`` and list the tools in ``tools``."""

    tools: List[_Tool] = []

    def list_tools(self) -> List[ToolInfo]:
        return [t.info for t in self.tools]

    def call(self, name: str, arguments: str) -> list:
        chosen = next((t for t in self.tools if t.info.name == name), None)
        if chosen is None:
            have = ", ".join(t.info.name for t in self.tools)
            raise not_found(f"no tool {name!r} in this plugin; it has {have}")
        try:
            out = chosen(json.loads(arguments))
        except Err as e:
            # A plain Err: componentize-py lowers exactly that type (an
            # HttpError, its subclass, would end the call as a crash).
            raise Err(e.value)
        except Exception as e:  # a bug or an unexpected answer: the caller gets words, not a crash
            raise failed(f"{type(e).__name__}: {e}")  # the host adds "<tool> failed: "
        if isinstance(out, str):
            return [Content_Text(out)]
        if isinstance(out, list) and out and all(type(c).__name__.startswith("Content_") for c in out):
            return out
        return [Content_Json(json.dumps(out))]
