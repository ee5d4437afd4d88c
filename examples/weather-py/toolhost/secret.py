"""Secrets the operator set with ``toolhost secret set <plugin> <name>``,
read through ``wasi:config/store``. The host redacts a secret's value
wherever it would appear in an error, the log or the audit."""

from typing import Optional

from componentize_py_types import Err
from wit_world.imports import store
from wit_world.imports.types import ToolError_Failed


def get(name: str) -> str:
    """The secret ``name``.

    Raises ``Err(ToolError_Failed)`` saying how to set it when it is not set:
    let it propagate out of ``call`` and the caller sees that message.
    """
    value = get_optional(name)
    if value is None:
        raise Err(ToolError_Failed(
            f"secret {name} is not set; the operator sets it with `toolhost secret set <plugin> {name}`"))
    return value


def get_optional(name: str) -> Optional[str]:
    """The secret ``name``, or ``None`` when it is not set."""
    try:
        return store.get(name)
    except Err as e:
        raise Err(ToolError_Failed(f"reading secret {name}: {getattr(e.value, 'value', e.value)}"))
