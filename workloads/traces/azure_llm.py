"""The Azure LLM inference trace format (Azure Public Dataset, 2023/2024).

Header `TIMESTAMP,ContextTokens,GeneratedTokens`; one row per request, timestamps such as
`2023-11-16 18:15:46.6805900` (up to 9 fractional digits, optional UTC offset; no offset
means UTC). Times become seconds after the earliest request. The trace has no task labels:
request i gets task ContextTokens_i mod K, a deterministic, roughly uniform split.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

from dartfl.arrivals import Arrivals
from dartfl.errors import TraceFormatError
from workloads._common import FloatArray, IntArray
from workloads.traces._io import (
    DEFAULT_TASK_NAMES,
    MAX_TOKENS,
    check_task_names,
    data_rows,
    finish,
    parse_tokens,
)

__all__ = ["AZURE_LLM_HEADER", "MAX_TOKENS", "LLMRequests", "read_azure_llm_csv", "read_azure_llm_requests"]

log = logging.getLogger(__name__)

AZURE_LLM_HEADER: tuple[str, str, str] = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_TIMESTAMP = re.compile(r"(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?\s*(Z|[+-]\d{2}:?\d{2})?")


@dataclass(frozen=True, eq=False)
class LLMRequests:
    """The trace's requests in time order: arrival (s after the first) and token counts."""

    times_s: FloatArray
    context_tokens: IntArray
    generated_tokens: IntArray


def read_azure_llm_csv(path: str | Path, task_names: Sequence[str] | None = None) -> Arrivals:
    """Arrivals from an Azure LLM trace; task = ContextTokens mod len(task_names)."""
    names = check_task_names(task_names) or DEFAULT_TASK_NAMES
    requests = read_azure_llm_requests(path)
    tasks = (requests.context_tokens % len(names)).astype(np.int64)
    return finish(Path(path), requests.times_s, tasks, names)


def read_azure_llm_requests(path: str | Path) -> LLMRequests:
    """Parse the whole trace, keeping the token counts (for per-request cost or rollout lengths)."""
    path = Path(path)
    it = data_rows(path, AZURE_LLM_HEADER)
    seconds: list[int] = []
    fractions: list[float] = []
    context: list[int] = []
    generated: list[int] = []
    cache: dict[str, int] = {}  # whole-second part -> epoch seconds; rows share seconds a lot
    for line, fields in it:
        if len(fields) != 3:
            raise TraceFormatError(
                str(path),
                line,
                f"expected 3 columns (TIMESTAMP,ContextTokens,GeneratedTokens), got {len(fields)}",
            )
        whole, fraction = _parse_timestamp(path, line, fields[0], cache)
        seconds.append(whole)
        fractions.append(fraction)
        context.append(parse_tokens(path, line, fields[1], "ContextTokens"))
        generated.append(parse_tokens(path, line, fields[2], "GeneratedTokens"))
    if not seconds:
        raise TraceFormatError(str(path), None, "no requests after the header")
    # Subtract in integers first: epoch seconds as float64 would blur the sub-microsecond digits.
    whole_s = np.array(seconds, dtype=np.int64)
    times = (whole_s - whole_s.min()).astype(np.float64) + np.array(fractions)
    times -= times.min()
    unsorted = int(np.count_nonzero(np.diff(times) < 0))
    if unsorted:
        log.warning("%s: %d requests were out of time order; sorted them by time", path, unsorted)
    order = np.argsort(times, kind="stable")
    return LLMRequests(
        times[order], np.array(context, dtype=np.int64)[order], np.array(generated, dtype=np.int64)[order]
    )


def _parse_timestamp(path: Path, line: int, text: str, cache: dict[str, int]) -> tuple[int, float]:
    """(whole epoch seconds, fraction of a second) of one TIMESTAMP field."""
    match = _TIMESTAMP.fullmatch(text)
    if match is None:
        raise TraceFormatError(
            str(path), line, f"TIMESTAMP {text!r} is not a date-time like '2023-11-16 18:15:46.6805900'"
        )
    date, clock, digits, offset = match.groups()
    key = f"{date}T{clock}{_iso_offset(offset)}"
    whole = cache.get(key)
    if whole is None:
        try:
            whole = cache[key] = int(datetime.fromisoformat(key).timestamp())
        except ValueError as exc:
            raise TraceFormatError(
                str(path), line, f"TIMESTAMP {text!r} is not a valid date-time: {exc}"
            ) from None
    fraction = int(digits) / 10 ** len(digits) if digits else 0.0
    return whole, fraction


def _iso_offset(offset: str | None) -> str:
    if offset is None or offset == "Z":
        return "+00:00"
    return offset if ":" in offset else f"{offset[:3]}:{offset[3:]}"
