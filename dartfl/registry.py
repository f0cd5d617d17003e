"""One spec grammar and one kind of registry for every policy family (edge, fleet, datacenter).

A spec names a policy and optionally sets its knobs:

    name                       every knob at its default
    name:VALUE[,VALUE...]      the entry's positional knobs, in their declared order
    name:key=value[,...]       knobs by key, in any order

A `Registry` maps names to `Entry`s: the factory, the typed knobs, the usage form. It parses
a spec, reads every value with its knob's type and check, and builds the policy; an unknown
name or key, a missing required value or a bad one gets one `ConfigError` that names the
spec and lists what is valid. The result is keyed by the spec exactly as the user wrote it
(`name` is set to it), so scripts can look results up by what they asked for.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from dartfl.errors import ConfigError

__all__ = [
    "Entry",
    "Knob",
    "Named",
    "Plugins",
    "Registry",
    "distinct",
    "fraction",
    "non_negative",
    "non_negative_int",
    "positive_int",
    "unit_interval",
]


class Named(Protocol):
    """What a registry builds: anything with a settable `name`."""

    name: str


P = TypeVar("P", bound=Named)
Q = TypeVar("Q", bound=Named)


@dataclass(frozen=True)
class Knob:
    """One setting of a policy: its spec key, how its text is read, and what values are valid.

    `check` returns None for a valid value, or what is wrong with it ("must lie in (0, 1)").
    `field` is the factory's keyword (the key with dashes as underscores unless given).
    """

    key: str
    read: Callable[[str], Any]
    help: str
    check: Callable[[Any], str | None] | None = None
    field: str = ""

    def __post_init__(self) -> None:
        if not self.field:
            object.__setattr__(self, "field", self.key.replace("-", "_"))

    def value(self, spec: str, text: str) -> Any:
        text = text.strip()
        try:
            value = self.read(text)
        except ValueError:
            kind = getattr(self.read, "__name__", "value")
            raise ConfigError(f"policy {spec!r}: {self.key} {text!r} is not a valid {kind}") from None
        problem = self.check(value) if self.check is not None else None
        if problem:
            raise ConfigError(f"policy {spec!r}: {self.key} {problem}, got {text}")
        return value


@dataclass(frozen=True)
class Entry(Generic[P]):
    """A policy a registry can build.

    `form` is the usage line shown in help and errors (e.g. `static:<x>`). The first
    `positional` knobs may be given bare (`static:0.5`, `threshold:2,16`), the first
    `required` of them must be (`static` alone is refused with `needs`, which says what is
    missing). The factory gets the knobs that were set as keywords, plus the registry
    caller's context (the edge family passes the loss weighting).
    """

    name: str
    form: str
    summary: str
    factory: Callable[..., P]
    knobs: tuple[Knob, ...] = ()
    positional: int = 0
    required: int = 0
    needs: str = ""

    def __post_init__(self) -> None:
        if not 0 <= self.required <= self.positional <= len(self.knobs):
            raise ValueError(f"entry {self.name!r}: required <= positional <= number of knobs")

    def ported(self, factory: Callable[..., Q]) -> Entry[Q]:
        """The same spec form and knobs, built by another family's `factory` (a fleet port)."""
        return Entry(
            self.name,
            self.form,
            self.summary,
            factory,
            knobs=self.knobs,
            positional=self.positional,
            required=self.required,
            needs=self.needs,
        )

    def knob(self, key: str) -> Knob | None:
        for knob in self.knobs:
            if knob.key == key:
                return knob
        return None


@dataclass(frozen=True)
class Plugins(Generic[P]):
    """Where a registry looks up the names its own entries do not claim (the edge family's
    installed plugins, dartfl/policies/plugins.py): `find` gives the Entry of a name or None;
    `listed` the (form, summary) of each, given which names are taken; `shadowed` is told of
    a name an entry claimed, so that a plugin of that name can be warned about."""

    find: Callable[[str], Entry[P] | None]
    listed: Callable[[Callable[[str], bool]], list[tuple[str, str]]]
    shadowed: Callable[[str], None]


@dataclass
class Registry(Generic[P]):
    """The policies of one family, by name. `family` names it in errors ("datacenter policy")."""

    family: str
    entries: dict[str, Entry[P]] = field(default_factory=dict)
    plugins: Plugins[P] | None = None

    @classmethod
    def of(cls, family: str, entries: Iterable[Entry[P]]) -> Registry[P]:
        registry = cls(family)
        for entry in entries:
            registry.add(entry)
        return registry

    def add(self, entry: Entry[P]) -> None:
        if entry.name in self.entries:
            raise ValueError(f"{self.family} {entry.name!r} is registered twice")
        self.entries[entry.name] = entry

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.entries)

    def help_lines(self, with_plugins: bool = False) -> list[str]:
        """One line per policy: its form and what it does (and each installed plugin's)."""
        rows = [(e.form, e.summary) for e in self.entries.values()]
        if with_plugins and self.plugins is not None:
            rows += self.plugins.listed(self.entries.__contains__)
        width = max(len(form) for form, _ in rows)
        return [f"{form.ljust(width)}  {summary}" for form, summary in rows]

    def entry(self, spec: str) -> Entry[P]:
        """The entry a spec names, a plugin's if no entry of the registry's own does;
        ConfigError listing every valid form if there is none."""
        name = spec.strip().partition(":")[0].strip()
        entry = self.entries.get(name)
        if self.plugins is not None:
            if entry is None:
                entry = self.plugins.find(name)
            else:
                self.plugins.shadowed(name)
        if entry is None:
            forms = "\n  ".join(self.help_lines(with_plugins=True))
            raise ConfigError(f"unknown {self.family} {spec.strip()!r}; valid policies:\n  {forms}")
        return entry

    def parse(self, spec: str) -> tuple[Entry[P], dict[str, Any]]:
        """The entry and the knob values (factory keywords) that `spec` sets."""
        entry = self.entry(spec)
        spec = spec.strip()
        _, colon, arg = spec.partition(":")
        items = arg.strip().split(",") if colon else []
        if any(not item.strip() for item in items):
            raise ConfigError(f"policy {spec!r}: an empty value (a stray ':' or ','); expected {entry.form}")
        keyed = [item for item in items if "=" in item]
        values: dict[str, Any] = {}
        if keyed and len(keyed) < len(items):
            raise ConfigError(f"policy {spec!r}: give every value by key or none; expected {entry.form}")
        if keyed:
            for item in items:
                key, _, text = item.partition("=")
                knob = entry.knob(key.strip())
                if knob is None:
                    valid = ", ".join(k.key for k in entry.knobs) or "none"
                    raise ConfigError(f"policy {spec!r}: unknown key {key.strip()!r}; valid: {valid}")
                if knob.field in values:  # the last would win silently: say which was meant
                    raise ConfigError(f"policy {spec!r}: key {key.strip()!r} given twice; give it once")
                values[knob.field] = knob.value(spec, text)
        else:
            if len(items) > entry.positional:
                raise ConfigError(f"policy {spec!r}: expected {entry.form}")
            for knob, text in zip(entry.knobs, items, strict=False):
                values[knob.field] = knob.value(spec, text)
        if any(knob.field not in values for knob in entry.knobs[: entry.required]):
            raise ConfigError(f"policy {spec!r} {entry.needs or 'expects ' + entry.form}")
        return entry, values

    def build(self, spec: str, **context: Any) -> P:
        """The policy `spec` describes, named by the spec as written."""
        entry, values = self.parse(spec)
        try:
            policy = entry.factory(**values, **context)
        except ConfigError as exc:
            raise ConfigError(f"policy {spec.strip()!r}: {exc}") from None
        policy.name = spec.strip()
        return policy


# -- checks shared by the families ---------------------------------------------------------------


def distinct(specs: Iterable[str]) -> list[str]:
    """`specs` as a list, refusing a spec given twice: results are keyed by their spec, so a
    repeat would run twice and keep one of the two under one name."""
    out = list(specs)
    seen: set[str] = set()
    for spec in out:
        if spec.strip() in seen:
            raise ConfigError(f"policy {spec!r} is given twice; give each --policy once")
        seen.add(spec.strip())
    return out


def unit_interval(value: float) -> str | None:
    """A share in [0, 1]."""
    return None if math.isfinite(value) and 0.0 <= value <= 1.0 else "must lie in [0, 1]"


def fraction(value: float) -> str | None:
    """A fraction strictly between 0 and 1."""
    return None if math.isfinite(value) and 0.0 < value < 1.0 else "must be a fraction in (0, 1)"


def non_negative(value: float) -> str | None:
    return None if math.isfinite(value) and value >= 0 else "must be a finite number >= 0"


def positive_int(value: int) -> str | None:
    return None if value >= 1 else "must be an integer >= 1"


def non_negative_int(value: int) -> str | None:
    return None if value >= 0 else "must be an integer >= 0"
