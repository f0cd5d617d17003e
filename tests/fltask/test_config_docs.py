"""Every federated run-config key is documented, with the default pyproject.toml gives it."""

from __future__ import annotations

import re
import tomllib
from dataclasses import fields
from pathlib import Path

import pytest

from dartfl.errors import ConfigError
from fltask.config import FlConfig

ROOT = Path(__file__).resolve().parents[2]


def test_every_run_config_key_is_documented_with_its_default() -> None:
    table = (ROOT / "docs/fl-config.md").read_text()
    rows = {
        m.group(1): m.group(2).strip().strip("`")
        for m in re.finditer(r"^\| `([a-z0-9-]+)` \| ([^|]+) \|", table, re.M)
    }
    defaults = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    keys = {f.name.replace("_", "-") for f in fields(FlConfig)}
    assert set(rows) == keys == set(defaults)
    for key, documented in rows.items():
        value = defaults[key]
        if isinstance(value, str):
            assert documented == (value or '""'), key
        else:
            assert float(documented) == float(value), key


def test_profile_cores_runs_the_virtual_device_on_fewer_cores() -> None:
    assert FlConfig(profile="pi4").device_profile().cores.count == 4
    assert FlConfig(profile="pi4", profile_cores=1).device_profile().cores.count == 1
    with pytest.raises(ConfigError, match=r"profile-cores must lie in 0\.\.4"):
        FlConfig(profile="pi4", profile_cores=5)


def test_a_round_deadline_the_agents_would_refuse_is_refused_with_the_run_config() -> None:
    # The agent refuses a round order past a day (edge_client.round_messages); a run config
    # asking for one failed only once the first round reached the devices.
    assert FlConfig(round_deadline_s=86_400.0).round_deadline_s == 86_400.0
    with pytest.raises(ConfigError, match=r"round-deadline-s must be at most 86400 s"):
        FlConfig(round_deadline_s=86_401.0)
