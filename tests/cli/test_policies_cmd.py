"""`dartfl policies`: every family's policies, and the installed plugins among the device's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dartfl.cli.main import main
from tests.plugin_fixtures import on_path, write_plugin

PLUGIN = '''
from dartfl.policies.inference_first import InferenceFirst


class Mine(InferenceFirst):
    """my own baseline"""
'''


def test_policies_lists_every_family_and_the_installed_plugins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = write_plugin(tmp_path, "mine-pkg", {"mine": "mine_policy:Mine"}, "mine_policy", PLUGIN)
    on_path(monkeypatch, root, "mine_policy")
    assert main(["policies", "--json"]) == 0
    families = json.loads(capsys.readouterr().out)
    device = {row["name"]: row for row in families["device"]}
    assert device["dart"]["source"] == "built-in" and device["dart"]["form"].startswith("dart[")
    assert device["mine"] == {
        "name": "mine",
        "form": "mine",
        "summary": "my own baseline",
        "source": "plugin mine_policy:Mine from mine-pkg 0.1",
    }
    assert {row["name"] for row in families["fleet"]} == {
        "dart",
        "inference-only",
        "inference-first",
        "static",
    }
    datacenter = {row["name"]: row["source"] for row in families["datacenter"]}
    assert datacenter["verl-dynamic"] == "ray" and datacenter["one-step"] == "built-in"
    assert main(["policies"]) == 0
    text = capsys.readouterr().out
    assert "mine  " in text and "my own baseline [plugin mine_policy:Mine from mine-pkg 0.1]" in text
    assert "Your own policy: docs/plugins.md." in text
