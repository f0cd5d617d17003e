"""What an install of DART-FL brings with it, read from the installed distributions' metadata:
the closure of its requirements (every published extra), whether each one is satisfied, and
each distribution's files (for tests/wheel_fixtures.py's fresh venv).

Import explicitly (`from tests import install_fixtures as inst`); nothing here is collected.
"""

from __future__ import annotations

import importlib.metadata as md
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

__all__ = ["PROJECT", "Closure", "project_requirements", "requirement_closure", "top_level_entries"]

PROJECT = "dartfl"


@dataclass
class Closure:
    """The distributions a requirement pulls in (canonical name -> distribution) and what of it
    is not met: "missing NAME (needed by X)" or "X needs NAME SPEC, found VERSION"."""

    dists: dict[str, md.Distribution]
    problems: list[str]


def project_requirements(pyproject: Path) -> tuple[list[str], list[str]]:
    """(Requires-Dist lines, extras) of a pyproject.toml, as its wheel's METADATA has them."""
    project = tomllib.loads(pyproject.read_text())["project"]
    lines = list(project.get("dependencies", []))
    extras = project.get("optional-dependencies", {})
    for extra, reqs in extras.items():
        for text in reqs:
            req, _, marker = text.partition(";")
            both = f"({marker.strip()}) and extra == {extra!r}" if marker.strip() else f"extra == {extra!r}"
            lines.append(f"{req.strip()}; {both}")
    return lines, sorted(extras)


def requirement_closure(requires: Iterable[str], extras: Iterable[str], parent: str = PROJECT) -> Closure:
    """Walk `requires` (Requires-Dist lines of `parent`, installed with `extras`) through the
    distributions installed here. A requirement of `parent` itself (`dartfl[edge-base]`, an
    extra made of another) is expanded from `requires`, not from an installed dartfl."""
    own = list(requires)
    dists: dict[str, md.Distribution] = {}
    problems: list[str] = []
    todo = [(Requirement(line), frozenset({"", *extras}), parent) for line in own]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        req, parent_extras, needed_by = todo.pop()
        if req.marker is not None and not any(
            req.marker.evaluate({**default_environment(), "extra": extra}) for extra in parent_extras
        ):
            continue
        name = canonicalize_name(req.name)
        key = (name, frozenset(req.extras))
        if name == canonicalize_name(parent):
            if key not in seen:
                seen.add(key)
                todo += [(Requirement(line), frozenset({"", *req.extras}), parent) for line in own]
            continue
        try:
            dist = md.distribution(req.name)
        except md.PackageNotFoundError:
            problems.append(f"missing {req.name} (needed by {needed_by})")
            continue
        if req.specifier and not req.specifier.contains(dist.version, prereleases=True):
            problems.append(f"{needed_by} needs {req.name}{req.specifier}, found {dist.version}")
        if key in seen:
            continue
        seen.add(key)
        dists[name] = dist
        wanted, by = frozenset({"", *req.extras}), f"{dist.metadata['Name']} {dist.version}"
        todo += [(Requirement(line), wanted, by) for line in dist.requires or []]
    return Closure(dists, problems)


def top_level_entries(dist: md.Distribution) -> set[str]:
    """The names a distribution puts directly into site-packages (packages, modules, its
    .dist-info, shared-library folders), from its RECORD; .pth files and scripts left out."""
    names = set()
    for file in dist.files or []:
        parts = Path(str(file)).parts
        if not parts or parts[0] in ("..", "__pycache__") or parts[0].endswith(".pth"):
            continue
        names.add(parts[0])
    return names
