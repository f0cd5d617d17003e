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

import inspect
import logging
from collections.abc import Callable
from dataclasses import replace
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from dartfl.errors import ConfigError
from dartfl.policies.base import Policy
from dartfl.registry import Entry, Plugins

__all__ = [
    "EDGE_PLUGINS",
    "PLUGIN_GROUP",
    "find_plugin",
    "plugin_installed",
    "plugin_list",
    "plugin_rows",
    "plugin_sources",
]

log = logging.getLogger(__name__)

PLUGIN_GROUP = "dartfl.policies"
# A spec is `name[:values]`, values split at commas and keys at `=`: a name with any of these
# (or blank at either end) could never be asked for.
_SPEC_SYNTAX = (":", ",", "=")


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


def plugin_installed(name: str) -> bool:
    """Whether a plugin called `name` is installed, without importing it."""
    return bool(entry_points(group=PLUGIN_GROUP, name=name))


def plugin_sources(specs: list[str], taken: Callable[[str], bool]) -> dict[str, str]:
    """For the specs that name an installed plugin: the plugin's object and package with its
    version, by name (what a stored result needs to say which code made it)."""
    sources = {}
    for spec in specs:
        name = spec.strip().partition(":")[0].strip()
        if not taken(name):
            for point in entry_points(group=PLUGIN_GROUP, name=name):
                sources[name] = f"{point.value} from {_package(point)}"
    return sources


def plugin_rows(taken: Callable[[str], bool]) -> list[dict[str, str]]:
    """{name, form, summary, source} of every installed plugin a spec can name (`dartfl
    policies`): each is loaded, and one that cannot be says why in its summary. A plugin whose
    name a built-in takes, or the spec grammar cannot express, is named in a warning."""
    rows = []
    seen: set[str] = set()
    for point in entry_points(group=PLUGIN_GROUP):
        if point.name in seen:
            continue  # registered twice: find_plugin's error is its row
        seen.add(point.name)
        if taken(point.name):
            _warn_shadowed(point.name)
            continue
        if not _expressible(point.name):
            log.warning(
                "policy plugin %r (%s, from %s) has a name no --policy can give (no %s, no blank "
                "at either end); register it under another name",
                point.name,
                point.value,
                _package(point),
                " ".join(repr(c) for c in _SPEC_SYNTAX),
            )
            continue
        form, summary = point.name, ""
        try:
            entry = find_plugin(point.name)  # refuses a name two packages register
        except ConfigError as exc:
            summary = str(exc)
        else:
            if entry is not None:
                form, summary = entry.form, entry.summary
        rows.append({"name": point.name, "form": form, "summary": summary, "source": _source(point)})
    return rows


def plugin_list(taken: Callable[[str], bool]) -> list[tuple[str, str]]:
    """(form, summary) of every plugin of `plugin_rows`, for the list of valid policies."""
    return [(row["form"], f"{row['summary']} ({row['source']})") for row in plugin_rows(taken)]


_warned: set[str] = set()  # built-in names a plugin was found to shadow, said once a process


def _warn_shadowed(name: str) -> None:
    """Warn, once per name and process, that an installed plugin has a built-in's name (a
    lookup of about 2 ms, made when a spec is built, never per decision)."""
    if name in _warned:
        return
    for point in entry_points(group=PLUGIN_GROUP, name=name):
        _warned.add(name)
        log.warning(
            "policy plugin %r (%s, from %s) has the name of a built-in policy, which runs instead; "
            "register the plugin under another name",
            point.name,
            point.value,
            _package(point),
        )


def _expressible(name: str) -> bool:
    return bool(name) and name == name.strip() and not any(c in name for c in _SPEC_SYNTAX)


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
        return replace(target, factory=_checked(target.factory, _source(point)))
    if isinstance(target, type) and issubclass(target, Policy):
        summary = (target.__doc__ or "").strip().splitlines()
        factory = _checked(_class_factory(target), _source(point))
        return Entry(point.name, point.name, summary[0] if summary else "(no docstring)", factory)
    kind = f"class {target.__name__}" if isinstance(target, type) else f"{type(target).__name__}"
    raise ConfigError(
        f"{where} is a {kind}, not a dartfl.policies.base.Policy subclass or a dartfl.registry.Entry "
        "(docs/plugins.md)"
    )


def _class_factory(cls: type[Policy]) -> Callable[..., Policy]:
    """A factory for a Policy class, built with no arguments but the loss weighting, which
    it gets when its constructor takes one (`loss_weighting=`, or **kwargs)."""
    params = inspect.signature(cls).parameters.values()
    takes_weighting = any(p.name == "loss_weighting" or p.kind is p.VAR_KEYWORD for p in params)

    construct: Callable[..., Policy] = cls  # a subclass's constructor, whatever it takes

    def build(loss_weighting: str = "uniform") -> Policy:
        if takes_weighting:
            return construct(loss_weighting=loss_weighting)
        if loss_weighting != "uniform":  # asked for by --loss-weights: say it cannot apply
            raise ConfigError(
                f"takes no loss weighting, so --loss-weights {loss_weighting} cannot apply to it; "
                "drop the flag or give its constructor a loss_weighting parameter"
            )
        return construct()

    return build


def _checked(factory: Callable[..., Any], source: str) -> Callable[..., Policy]:
    """`factory`, with whatever it raises or builds amiss turned into one ConfigError that
    names the plugin (the registry puts the spec before it): its constructor is someone else's
    code."""

    def build(**kwargs: Any) -> Policy:
        try:
            policy = factory(**kwargs)
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None
        except TypeError as exc:
            hint = (
                "; a Policy subclass is built with no arguments but loss_weighting: declare an Entry "
                "for knobs (docs/plugins.md)"
                if "argument" in str(exc)
                else ""
            )
            raise ConfigError(f"{source} cannot be built: TypeError: {exc}{hint}") from None
        except Exception as exc:
            raise ConfigError(f"{source} cannot be built: {type(exc).__name__}: {exc}") from None
        if not isinstance(policy, Policy):
            raise ConfigError(f"{source} built a {type(policy).__name__}, not a dartfl.policies.base.Policy")
        return policy

    return build


def _source(point: EntryPoint) -> str:
    return f"plugin {point.value} from {_package(point)}"


def _package(point: EntryPoint) -> str:
    dist = point.dist
    return f"{dist.name} {dist.version}" if dist is not None else "an unknown package"


# How the edge registry consults the installed plugins (dartfl/policies/__init__.py).
EDGE_PLUGINS: Plugins[Policy] = Plugins(find_plugin, plugin_list, _warn_shadowed)
