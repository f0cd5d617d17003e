"""The one spec grammar (dartfl.registry), as every policy family parses it."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from dartfl.datacenter.policies import DC_POLICIES
from dartfl.errors import ConfigError
from dartfl.policies import EDGE_POLICIES
from dartfl.registry import Entry, Knob, Registry, unit_interval
from dartfl.sim.fleet_policies import FLEET_POLICIES


@dataclass
class Toy:
    a: float = 0.5
    b: int = 3
    name: str = ""


TOYS = Registry.of(
    "toy",
    [
        Entry(
            "toy",
            "toy:<a>[,b]",
            "a toy",
            Toy,
            (Knob("a", float, "share", unit_interval), Knob("b", int, "count")),
            positional=2,
            required=1,
            needs="needs its share a, e.g. toy:0.5",
        ),
        Entry("plain", "plain", "no knobs", Toy),
    ],
)


def test_positional_and_keyed_forms_set_the_same_knobs_and_name_the_policy_by_its_spec() -> None:
    assert TOYS.build("toy:0.25,7") == Toy(0.25, 7, "toy:0.25,7")
    assert TOYS.build(" toy:b=7, a=0.25 ") == Toy(0.25, 7, "toy:b=7, a=0.25")
    assert TOYS.build("toy:0.1").b == 3


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("robot", r"unknown toy 'robot'; valid policies:\n  toy:<a>\[,b\]  a toy\n  plain"),
        ("toy", r"policy 'toy' needs its share a, e.g. toy:0.5"),
        ("toy:b=2", r"policy 'toy:b=2' needs its share a"),
        ("toy:0.5,b=2", r"give every value by key or none"),
        ("toy:c=1", r"unknown key 'c'; valid: a, b"),
        ("toy:1.5", r"policy 'toy:1.5': a must lie in \[0, 1\], got 1.5"),
        ("toy:x", r"policy 'toy:x': a 'x' is not a valid float"),
        ("toy:0.5,2,9", r"expected toy:<a>\[,b\]"),
        ("plain:1", r"expected plain"),
        # A stray ':' or ',' ran as a policy of its own name ('plain:' beside 'plain').
        ("plain:", r"policy 'plain:': an empty value \(a stray ':' or ','\); expected plain"),
        ("toy:0.5,", r"an empty value"),
        ("toy:,0.5", r"an empty value"),
        # The last value won silently: dart:v=1,v=2 ran as dart:v=2 under the name given.
        ("toy:a=0.1,a=0.2", r"policy 'toy:a=0.1,a=0.2': key 'a' given twice; give it once"),
    ],
)
def test_every_bad_spec_gets_one_error_that_names_it_and_what_is_valid(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TOYS.build(spec)


def test_a_factory_error_names_the_spec() -> None:
    with pytest.raises(ConfigError, match=r"policy 'threshold:9,2': threshold needs 0 <= low < high"):
        EDGE_POLICIES.build("threshold:9,2", loss_weighting="uniform")


def test_fleet_ports_share_the_scalar_entries_grammar() -> None:
    for name in FLEET_POLICIES.names:
        assert FLEET_POLICIES.entries[name].knobs == EDGE_POLICIES.entries[name].knobs
        assert FLEET_POLICIES.entries[name].form == EDGE_POLICIES.entries[name].form


def test_every_family_lists_its_forms_in_help() -> None:
    for registry in (EDGE_POLICIES, FLEET_POLICIES, DC_POLICIES):
        lines = registry.help_lines()
        assert len(lines) == len(registry.names)
        assert all(line.split()[0].split("[")[0].split(":")[0] in registry.names for line in lines)
