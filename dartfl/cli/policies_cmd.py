"""`dartfl policies`: what each command's `--policy` accepts, installed plugins included.

Three families share one spec grammar (dartfl/registry.py): the device's policies (`dartfl
sim`, `edge run`, `edge replay --spawn-agent`, `fl`), with the plugins other installed
packages provide (docs/plugins.md); their vectorised ports in `dartfl fleet`; and the GPU
split policies of `dartfl dc sim` (those the Ray engine runs marked).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "policies", help="list the policies each command accepts, installed plugins included"
    )
    p.add_argument(
        "--json",
        action="store_true",
        help='print one object {"device": [...], "fleet": [...], "datacenter": [...]}, each entry '
        "{name, form, summary, source}",
    )
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    families = _families()
    if args.json:
        json.dump(families, sys.stdout)
        sys.stdout.write("\n")
        return 0
    titles = {
        "device": "dartfl sim, edge run, edge replay --spawn-agent, fl",
        "fleet": "dartfl fleet",
        "datacenter": "dartfl dc sim; [ray]: dc run --engine ray too",
    }
    for family, rows in families.items():
        print(f"{family} policies ({titles[family]}):")
        width = max(len(row["form"]) for row in rows)
        for row in rows:
            source = "" if row["source"] in ("built-in", "ray") else f" [{row['source']}]"
            ray = " [ray]" if row["source"] == "ray" else ""
            print(f"  {row['form'].ljust(width)}  {row['summary']}{ray}{source}")
        print()
    print("Your own policy: docs/plugins.md.")
    return 0


def _families() -> dict[str, list[dict[str, Any]]]:
    from dartfl.datacenter.policies import DC_POLICIES, RAY_POLICIES
    from dartfl.policies import EDGE_POLICIES
    from dartfl.policies.plugins import plugin_rows
    from dartfl.sim.fleet_policies import FLEET_POLICIES

    def rows(entries: Any, source: Any = lambda name: "built-in") -> list[dict[str, Any]]:
        return [
            {"name": e.name, "form": e.form, "summary": e.summary, "source": source(e.name)}
            for e in entries.values()
        ]

    return {
        "device": rows(EDGE_POLICIES.entries) + plugin_rows(EDGE_POLICIES.entries.__contains__),
        "fleet": rows(FLEET_POLICIES.entries),
        "datacenter": rows(
            DC_POLICIES.entries, lambda name: "ray" if name in RAY_POLICIES.entries else "built-in"
        ),
    }
