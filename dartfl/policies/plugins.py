"""Policies from other packages: the `dartfl.policies` entry-point group (docs/plugins.md).

A researcher who wants to compare a scheduler of their own against DART on the same traces,
or run it on a real device, writes it against `dartfl.policies.base.Policy` in a package of
their own and names it under this group in that package's metadata:

    [project.entry-points."dartfl.policies"]
    greedy = "my_scheduler.policy:Greedy"

Once the package is installed (`pip install -e .` is enough), `--policy greedy` builds it in
`dartfl sim`, `dartfl edge run`, `dartfl edge replay --spawn-agent` and `dartfl fl`, beside
the built-in policies. The object named may be

- a `Policy` subclass, built with no arguments (its spec is its bare name), or
- a `dartfl.registry.Entry` whose factory returns a Policy: typed knobs, a usage form and a
  summary for help, exactly as the built-in policies declare theirs (the factory is also
  given `loss_weighting`, as theirs are).

Plugins are looked up only when a spec names no built-in policy, so a broken plugin cannot
break the built-ins, and a plugin cannot shadow one (it is named in a warning and skipped).
Loading one imports its module: that is running its code, which is why only installed
packages are consulted, never a path given on the command line or over the wire.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from dartfl.errors import ConfigError
from dartfl.policies.base import Policy
from dartfl.registry import Entry

__all__ = ["PLUGIN_GROUP", "find_plugin", "plugin_forms"]

log = logging.getLogger(__name__)

PLUGIN_GROUP = "dartfl.policies"


def find_plugin(name: str) -> Entry[Policy] | None:
    """The Entry of the installed plugin called `name`, None if there is none. One that cannot
    be loaded is a ConfigError naming it, its package and the fix; only the plugin asked for
    is imported."""
    points = entry_points(group=PLUGIN_GROUP, name=name)
    if not points:
        return None
    if len(points) > 1:
        packages = ", ".join(sorted(_package(p) for p in points))
        raise ConfigError(f"policy plugin {name!r} is registered by several packages ({packages}); keep one")
    (point,) = points
    return _entry(point)


def plugin_forms(taken: Callable[[str], bool]) -> list[str]:
    """One line per installed plugin not shadowed by a built-in name, without importing any:
    for the list of valid policies in errors. A shadowed one is named in a warning."""
    lines = []
    for point in entry_points(group=PLUGIN_GROUP):
        if taken(point.name):
            log.warning(
                "policy plugin %r (%s, from %s) has the name of a built-in policy and is never used; "
                "register it under another name",
                point.name,
                point.value,
                _package(point),
            )
            continue
        lines.append(f"{point.name}  plugin {point.value} (from {_package(point)})")
    return lines


def _entry(point: EntryPoint) -> Entry[Policy]:
    where = f"policy plugin {point.name!r} ({point.value}, from {_package(point)})"
    try:
        target: Any = point.load()
    except Exception as exc:  # any import-time failure of someone else's code
        raise ConfigError(
            f"{where} cannot be loaded: {type(exc).__name__}: {exc}; fix that package or uninstall it"
        ) from None
    if isinstance(target, Entry):
        if target.name != point.name:
            raise ConfigError(
                f"{where} is an Entry named {target.name!r}: the entry point and the Entry must "
                "share one name"
            )
        return target
    if isinstance(target, type) and issubclass(target, Policy):
        summary = (target.__doc__ or "").strip().splitlines()
        return Entry(point.name, point.name, summary[0] if summary else "(plugin)", _without_context(target))
    raise ConfigError(
        f"{where} is a {type(target).__name__}, not a dartfl.policies.base.Policy subclass or a "
        "dartfl.registry.Entry (docs/plugins.md)"
    )


def _without_context(cls: type[Policy]) -> Callable[..., Policy]:
    """A factory for a Policy class built with no arguments: the registry's context (the loss
    weighting) is the policy's own business."""

    def build(**_context: Any) -> Policy:
        return cls()

    return build


def _package(point: EntryPoint) -> str:
    dist = point.dist
    return f"{dist.name} {dist.version}" if dist is not None else "an unknown package"
