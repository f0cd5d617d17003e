"""`--set KEY=VALUE`: the run-config overrides of the `dartfl fl` commands, parsed into
numbers where they read as one and checked against the keys Flower's run config knows
(`fltask.config.FlConfig`, imported when a command runs: it pulls in torch's side)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from dartfl.errors import ConfigError

__all__ = ["add_set_argument", "checked_sets", "parse_sets", "reject_unknown_keys"]


def add_set_argument(
    parser: argparse.ArgumentParser,
    help: str = "a run-config key of docs/fl-config.md (repeatable)",
    owned: Mapping[str, str] | None = None,
) -> None:
    """The repeatable `--set KEY=VALUE` flag (into `args.set`, a list); its help names the keys
    `owned` by the command's own flags, which `checked_sets` refuses."""
    if owned:
        help = f"{help}; not {', '.join(owned)}: this command sets them itself"
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=help)


def parse_sets(items: list[str]) -> dict[str, int | float | str]:
    out: dict[str, int | float | str] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        value: int | float | str
        try:
            value = int(text)
        except ValueError:
            try:
                value = float(text)
            except ValueError:
                value = text
        out[key.strip()] = value
    return out


def checked_sets(items: list[str], owned: Mapping[str, str]) -> dict[str, int | float | str]:
    """The --set overrides; ConfigError for an unknown key or one the command's flags own."""
    overrides = parse_sets(items)
    reject_unknown_keys(overrides)
    for key in overrides:
        if key in owned:
            raise ConfigError(f"--set {key}=... is not taken here; use {owned[key]}")
    return overrides


def reject_unknown_keys(overrides: dict[str, int | float | str]) -> None:
    from fltask.config import FlConfig

    known = set(FlConfig().to_run_config())
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ConfigError(f"unknown run-config key(s) {unknown}; valid: {', '.join(sorted(known))}")
