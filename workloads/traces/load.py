"""Open any supported trace by its header, and the trace bundled with the package."""

from __future__ import annotations

from collections.abc import Sequence
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

import numpy as np

from dartfl.arrivals import Arrivals
from dartfl.errors import TraceFormatError
from workloads import data as _data
from workloads.traces._io import first_line, header_problem, read_once
from workloads.traces.azure_functions import FUNCTIONS_KEY_COLUMNS, read_azure_functions_csv
from workloads.traces.azure_llm import AZURE_LLM_HEADER, read_azure_llm_csv
from workloads.traces.burstgpt import BURSTGPT_HEADER, read_burstgpt_csv
from workloads.traces.time_task import TIME_TASK_HEADER, read_time_task_csv

__all__ = [
    "BUNDLED_AZURE_CONV",
    "BUNDLED_TRACE_NAME",
    "TRACE_FORMATS",
    "bundled_azure_conv",
    "bundled_azure_conv_file",
    "detect_format",
    "load_trace",
    "load_trace_and_format",
]

# Format name -> the leading header columns that identify it.
TRACE_FORMATS: dict[str, tuple[str, ...]] = {
    "time-task": TIME_TASK_HEADER,
    "azure-llm": AZURE_LLM_HEADER,
    "azure-functions": FUNCTIONS_KEY_COLUMNS,
    "burstgpt": BURSTGPT_HEADER,
}
BUNDLED_AZURE_CONV = "azure_llm_conv_2023.csv"
# What `load_trace` (and every `--trace`) takes for the bundled trace, with or without a
# checkout: the wheel installs the file under another package's name.
BUNDLED_TRACE_NAME = "azure-conv"


def detect_format(path: str | Path) -> str:
    """The trace format named by the file's header (see TRACE_FORMATS)."""
    path = Path(path)
    line, fields = first_line(path)
    lowered = [f.lower() for f in fields]
    for name, columns in TRACE_FORMATS.items():
        if lowered[: len(columns)] == [c.lower() for c in columns]:
            return name
    expected = "one of " + ", ".join(repr(",".join(c)) for c in TRACE_FORMATS.values())
    raise TraceFormatError(str(path), line, header_problem(expected, fields))


def load_trace(
    path: str | Path,
    task_names: Sequence[str] | None = None,
    rng: np.random.Generator | None = None,
) -> Arrivals:
    """Read a trace in any supported format, detected from its header.

    task_names: for `time_s,task` files, the order (and allowed set) of tasks, else the file's
    own names; for the Azure and BurstGPT traces, the K tasks requests are mapped onto (default
    digits, fashion, uci-digits). rng seeds the within-minute spread of Azure Functions counts.
    The path `azure-conv` (BUNDLED_TRACE_NAME) is the bundled Azure LLM conversation hour. A
    pipe (`/dev/stdin`, `<(...)`) is read once, like a file.
    """
    return load_trace_and_format(path, task_names, rng)[1]


def load_trace_and_format(
    path: str | Path,
    task_names: Sequence[str] | None = None,
    rng: np.random.Generator | None = None,
) -> tuple[str, Arrivals]:
    """`load_trace`, with the format it detected (a TRACE_FORMATS name)."""
    path = Path(path)
    if str(path) == BUNDLED_TRACE_NAME and not path.exists():  # a file of that name wins
        with resources.as_file(bundled_azure_conv_file()) as bundled:
            return load_trace_and_format(bundled, task_names, rng)
    with read_once(path):  # detecting the format and reading are two passes over the file
        kind = detect_format(path)
        if kind == "time-task":
            return kind, read_time_task_csv(path, task_names)
        if kind == "azure-llm":
            return kind, read_azure_llm_csv(path, task_names)
        if kind == "burstgpt":
            return kind, read_burstgpt_csv(path, task_names)
        return kind, read_azure_functions_csv(path, task_names, rng)


def bundled_azure_conv(task_names: Sequence[str] | None = None) -> Arrivals:
    """The bundled Azure LLM conversation trace (1 h, 19,366 requests; CC-BY 4.0, see data/README.md)."""
    with resources.as_file(bundled_azure_conv_file()) as path:
        return read_azure_llm_csv(path, task_names)


def bundled_azure_conv_file() -> Traversable:
    """The bundled Azure LLM conversation trace's file (package data; `resources.as_file` it)."""
    # The package object, not its name: the wheel installs workloads as dartfl_workloads.
    return resources.files(_data).joinpath(BUNDLED_AZURE_CONV)
