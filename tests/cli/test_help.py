"""Every subcommand and every option of `dartfl` says what it does: the test walks the parser
that `dartfl --help` prints from, so a flag added without help fails here."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from dartfl.cli.main import build_parser


def _undocumented(parser: argparse.ArgumentParser, path: str) -> Iterator[str]:
    """Each command (as `dartfl a b`) and argument (as `dartfl a b --flag`) without help."""
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                if not str(helps.get(name) or "").strip():
                    yield f"{path} {name}"
                yield from _undocumented(sub, f"{path} {name}")
        elif not str(action.help or "").strip():
            yield f"{path} {'/'.join(action.option_strings) or action.metavar or action.dest}"


def _commands(parser: argparse.ArgumentParser) -> int:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return sum(1 + _commands(p) for a in subs for p in a.choices.values())


def test_every_subcommand_and_option_has_help_text() -> None:
    parser = build_parser()
    assert _commands(parser) >= 20  # the walk reaches the nested subcommands (`edge run`, `runs show`)
    assert list(_undocumented(parser, "dartfl")) == []


def test_the_walk_finds_an_option_without_help() -> None:
    parser = argparse.ArgumentParser(prog="x")
    sub = parser.add_subparsers()
    a = sub.add_parser("a", help="does a")
    a.add_argument("--documented", help="yes")
    a.add_argument("--bare")
    sub.add_parser("b")
    assert list(_undocumented(parser, "x")) == ["x a --bare", "x b"]
