"""toolhost's Python SDK for tool plugins built with componentize-py.

- ``toolhost.config.get(key)``: a setting the operator wrote in
  ``plugins.config.<plugin>`` (``None`` when unset).
- ``toolhost.secret.get(name)``: a secret the operator set with
  ``toolhost secret set <plugin> <name>``; raises a tool error saying how to
  set it when it is missing.
- ``toolhost.http``: ``get``/``post``/``request`` to the origins granted in
  ``plugins.grants.<plugin>.http``, over ``wasi:http`` (only in the
  ``http-tool`` world: ``import toolhost.http`` where you use it).

``@tool`` declares a tool (schema, latency), ``Plugin`` exports them; see
``toolhost/tools.py``. The tool's own types (``ToolInfo``, ``Content_Json``, ``ToolError_*``) are
the bindings' ``wit_world.imports.types``, as in a plugin without this SDK.
"""

from . import config, secret
from .tools import Plugin, failed, forbidden, invalid_input, not_found, tool

__all__ = ["Plugin", "config", "failed", "forbidden", "invalid_input", "not_found", "secret", "tool"]
