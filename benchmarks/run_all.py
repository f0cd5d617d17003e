"""Run every benchmark and save its raw output under benchmarks/results/ (`make bench`).

docs/benchmarks.md quotes these files; rerun this after changing a policy or a simulator.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"

# (script and arguments, file its stdout goes to, or None when it writes its own --json)
JOBS: list[tuple[list[str], str | None]] = [
    (["perf.py", "--json", str(RESULTS / "perf.json")], None),
    (["sim_targets.py", "--json", str(RESULTS / "sim_targets_full.json")], None),
    (["stress.py", "--json", str(RESULTS / "stress.json")], None),
    (["frontier.py", "--profile", "public-small"], "frontier_public-small.json"),
    (["frontier.py", "--profile", "pi4"], "frontier_pi4.json"),
    (["hopeless.py"], "hopeless.json"),
    (["fleet_scale.py"], "fleet_scale.json"),
]


def main() -> int:
    RESULTS.mkdir(exist_ok=True)
    failed = 0
    for args, out in JOBS:
        script = HERE / args[0]
        if not script.exists():
            print(f"skip {args[0]}: not present", file=sys.stderr)
            continue
        print(f"== {' '.join(args)}", file=sys.stderr)
        done = subprocess.run([sys.executable, str(script), *args[1:]], capture_output=True, text=True)
        sys.stderr.write(done.stderr)
        if done.returncode:
            failed += 1
            print(f"{args[0]} failed with exit code {done.returncode}", file=sys.stderr)
            continue
        if out:
            (RESULTS / out).write_text(done.stdout)
        else:
            sys.stdout.write(done.stdout)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
