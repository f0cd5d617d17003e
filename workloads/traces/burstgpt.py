"""The BurstGPT trace format (HPMLL/BurstGPT: ChatGPT and GPT-4 requests served on Azure).

Header `Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`; one row per
request, `Timestamp` in seconds from midnight of the trace's first day. Times become seconds
after the earliest request. Like the Azure LLM traces it has no task labels: request i gets
task `Request tokens`_i mod K, the rule of the Azure reader. Every row is a request that
arrived: the rows whose `Response tokens` is 0 (requests that failed upstream, which the
"without_fails" files leave out) are kept, since they loaded the server all the same; `Model`,
`Total tokens` and `Log Type` (conversation or API) are not read.
Wang et al., "BurstGPT: A Real-world Workload Dataset to Optimize LLM Serving Systems"
(arXiv 2401.17644) describe the trace.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from dartfl.arrivals import Arrivals
from dartfl.errors import TraceFormatError
from workloads.traces._io import (
    DEFAULT_TASK_NAMES,
    check_task_names,
    data_rows,
    finish,
    parse_time,
    parse_tokens,
)

__all__ = ["BURSTGPT_HEADER", "read_burstgpt_csv"]

BURSTGPT_HEADER: tuple[str, ...] = (
    "Timestamp",
    "Model",
    "Request tokens",
    "Response tokens",
    "Total tokens",
    "Log Type",
)


def read_burstgpt_csv(path: str | Path, task_names: Sequence[str] | None = None) -> Arrivals:
    """Arrivals from a BurstGPT file; task = Request tokens mod len(task_names)."""
    path = Path(path)
    names = check_task_names(task_names) or DEFAULT_TASK_NAMES
    it = data_rows(path, BURSTGPT_HEADER)
    times: list[float] = []
    tokens: list[int] = []
    for line, fields in it:
        if len(fields) != len(BURSTGPT_HEADER):
            raise TraceFormatError(
                str(path),
                line,
                f"expected {len(BURSTGPT_HEADER)} columns ({','.join(BURSTGPT_HEADER)}), got {len(fields)}",
            )
        times.append(parse_time(path, line, fields[0], "Timestamp"))
        tokens.append(parse_tokens(path, line, fields[2], "Request tokens"))
        parse_tokens(path, line, fields[3], "Response tokens")
    if not times:
        raise TraceFormatError(str(path), None, "no requests after the header")
    arrived = np.array(times, dtype=np.float64)
    arrived -= arrived.min()
    tasks = (np.array(tokens, dtype=np.int64) % len(names)).astype(np.int64)
    return finish(path, arrived, tasks, names)
