"""What an install of DART-FL brings with it, read from the installed distributions' metadata:
the closure of its requirements (every published extra), whether each one is satisfied, and
each distribution's files (for tests/test_wheel.py's fresh venv).

Import explicitly (`from tests import install_fixtures as inst`); nothing here is collected.
"""

from __future__ import annotations

import importlib.metadata as md
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

__all__ = ["PROJECT", "Closure", "published_extras", "requirement_closure"]

PROJECT = "dartfl"


@dataclass
class Closure:
    """The distributions a requirement pulls in (canonical name -> distribution) and what of it
    is not met: "missing NAME (needed by X)" or "X needs NAME SPEC, found VERSION"."""

    dists: dict[str, md.Distribution]
    problems: list[str]


def published_extras(dist: md.Distribution) -> list[str]:
    return sorted(dist.metadata.get_all("Provides-Extra") or [])


def requirement_closure(root: str, extras: Iterable[str], *, skip_root: bool = True) -> Closure:
    """Walk `root[extras]`'s requirements through the distributions installed here."""
    dists: dict[str, md.Distribution] = {}
    problems: list[str] = []
    todo: list[tuple[Requirement, frozenset[str], str]] = [
        (Requirement(f"{root}[{','.join(extras)}]" if extras else root), frozenset({""}), "the user")
    ]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        req, parent_extras, parent = todo.pop()
        if req.marker is not None and not any(
            req.marker.evaluate({**default_environment(), "extra": extra}) for extra in parent_extras
        ):
            continue
        name = canonicalize_name(req.name)
        try:
            dist = md.distribution(req.name)
        except md.PackageNotFoundError:
            problems.append(f"missing {req.name} (needed by {parent})")
            continue
        if req.specifier and not req.specifier.contains(dist.version, prereleases=True):
            problems.append(f"{parent} needs {req.name}{req.specifier}, found {dist.version}")
        key = (name, frozenset(req.extras))
        if key in seen:
            continue
        seen.add(key)
        if not (skip_root and name == canonicalize_name(root)):
            dists[name] = dist
        wanted = frozenset({"", *req.extras})
        for line in dist.requires or []:
            todo.append((Requirement(line), wanted, f"{dist.metadata['Name']} {dist.version}"))
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
