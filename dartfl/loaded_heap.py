"""Keep Python's cyclic garbage collector off what a long-running process loaded at start-up.

An agent that has imported PyTorch, ONNX Runtime and paho, loaded its datasets and built its
models holds about 400,000 objects that live as long as it does. CPython's oldest-generation
collection walks every tracked object, so each one stops the process (the interpreter lock is
held throughout) for as long as the walk takes: 170-215 ms on the 2-core development VM, longer
on a slower core. On a 100 ms SLO one such pause turns a second of traffic into
refusals: at 3,000 requests/s, 373-574 requests refused in one second of a 10-s replay that
otherwise refused none (docs/benchmarks.md, "The request path").

`gc.freeze()` moves every object alive now into a generation the collector never walks; what
the process allocates afterwards is collected as before. So the pause shrinks to the walk over
what serving keeps (~20,000 objects in a serving agent: 6-9 ms). Collecting first
frees today's garbage instead of freezing it. The cost: a reference cycle among objects alive at
the freeze that becomes unreachable while they are frozen is freed only when they thaw (memory
freed by reference counting, most of it, is freed at once), so the leak is bounded by what the
process held at the freeze.

Freeze when start-up is over and the serving (or sending) loop begins; `loaded_heap_frozen`
thaws on the way out, so that a test suite or a notebook that runs a command in-process gets its
collector back whole.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["loaded_heap_frozen"]

log = logging.getLogger(__name__)


@contextmanager
def loaded_heap_frozen() -> Iterator[None]:
    """Collect, then exempt every object alive now from cyclic collection until the block ends."""
    gc.collect()
    gc.freeze()
    log.info("%d objects loaded at start-up exempt from cyclic collection", gc.get_freeze_count())
    try:
        yield
    finally:
        gc.unfreeze()
