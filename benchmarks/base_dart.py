"""Today's DART for side-by-side comparisons, loaded from git instead of kept as a copy.

`load_base_dart()` reads dartfl/policies/dart.py as it was at BASE_COMMIT (before the closed
miss-budget loop, issue 12) with `git show` and executes it as a module of its own, so the
benchmarks can time and simulate both versions on the same inputs in one run.

    from base_dart import load_base_dart
    BaseDart = load_base_dart().DartPolicy
"""

from __future__ import annotations

import subprocess
import sys
import types
from functools import cache
from pathlib import Path

BASE_COMMIT = "47568a6"
REPO = Path(__file__).resolve().parent.parent


@cache
def load_base_dart(commit: str = BASE_COMMIT) -> types.ModuleType:
    """dartfl/policies/dart.py at `commit`, as the module `dart_base_<commit>`."""
    source = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{commit}:dartfl/policies/dart.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    name = f"dart_base_{commit}"
    module = types.ModuleType(name)
    module.__file__ = f"<git {commit}:dartfl/policies/dart.py>"
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module
