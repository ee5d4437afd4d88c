"""Settings from the operator's ``plugins.config.<plugin>``, read through
``wasi:config/store`` (no grant needed)."""

from typing import Optional

from componentize_py_types import Err
from wit_world.imports import store
from wit_world.imports.types import ToolError_Failed


def get(key: str) -> Optional[str]:
    """The setting ``key``, or ``None`` when the operator did not set it.

    Raises ``Err(ToolError_Failed)`` when the host cannot read its settings.
    """
    try:
        return store.get(key)
    except Err as e:
        raise Err(ToolError_Failed(f"reading setting {key}: {_text(e.value)}"))


def _text(error) -> str:
    return str(getattr(error, "value", error))
