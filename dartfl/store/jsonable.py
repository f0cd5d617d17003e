"""Strict JSON for the store's JSON columns: numpy values unwrapped, non-finite floats as null.

Strict so that SQLite's own json functions can query every column the store writes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dartfl.errors import ConfigError

__all__ = ["strict_json_text", "to_jsonable"]


def to_jsonable(value: Any) -> Any:
    """Plain JSON values: numpy scalars and arrays unwrapped, non-finite floats as None."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    for attr in ("item", "tolist"):  # numpy scalars, then arrays
        convert = getattr(value, attr, None)
        if callable(convert):
            try:
                return to_jsonable(convert())
            except (TypeError, ValueError):
                continue  # e.g. .item() on a multi-element array
    raise ConfigError(f"cannot store a value of type {type(value).__name__} as JSON: {value!r}")


def strict_json_text(value: Any) -> str:
    """`value` as compact JSON that SQLite's json functions accept (no NaN or Infinity)."""
    return json.dumps(to_jsonable(value), allow_nan=False, separators=(",", ":"))
