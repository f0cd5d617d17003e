"""The `workloads` package facade, checked in a fresh interpreter.

Under pytest the top-level name `workloads` can resolve to tests/workloads/ (see
conftest.py), so the facade is imported in a subprocess started from the project root.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_PROBE = """
import json, sys
import numpy as np
import workloads
HEAVY = ("matplotlib", "rich", "scipy")
a = workloads.generate("mmpp", duration_s=60, rate_per_s=10, task_names=("a", "b"),
                       rng=np.random.default_rng(1), zipf=1.0, params={"burst": 5})
missing = [name for name in workloads.__all__ if not hasattr(workloads, name)]
print(json.dumps({"missing": missing, "requests": a.num_requests, "names": list(workloads.GENERATOR_NAMES),
                  "bundled": workloads.bundled_azure_conv(("x",)).num_requests,
                  "heavy": sorted(m for m in sys.modules if m.split(".")[0] in HEAVY)}))
"""


def test_facade_exports_its_public_api_and_imports_nothing_heavy() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["missing"] == []
    assert result["requests"] > 0
    assert result["bundled"] == 19_366
    assert len(result["names"]) == 9
    assert result["heavy"] == []
