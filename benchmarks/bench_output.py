"""How a benchmark that reports one JSON document hands it over: on stdout, and to a file
when its command line names one (benchmarks/run_all.py reads either)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def print_json(result: Any, path: Path | None, *, indent: int = 1) -> None:
    """Print `result` as indented JSON and write the same text to `path` when one is given."""
    text = json.dumps(result, indent=indent)
    print(text)
    if path:
        path.write_text(text + "\n")
