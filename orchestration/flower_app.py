"""The Flower app that ships inside the package: `flwr run` needs a directory, this writes one.

A Flower app is a directory whose pyproject.toml names the ServerApp and the ClientApp
(`[tool.flwr.app.components]`) and the run config's defaults (`[tool.flwr.app.config]`).
`flwr run DIR` packs the directory into a FAB and sends it to a SuperLink. The app written
here carries no code: its components are the modules of the dartfl installed on each host,
so it works from any install (a wheel, or a checkout), and the server and every device must
run the same dartfl version (the app's `version`). `dartfl fl sim`, `dartfl fl run` and
`dartfl fl deploy-local` write it into a scratch directory for each call; `dartfl fl app DIR`
writes it for `flwr run` by hand.

The repository's own pyproject.toml is a Flower app too (`flwr run .` in a checkout, the code
packed into the FAB); tests/orchestration/test_flower_app.py keeps its components and config
equal to these.

Module paths that the installed package names as strings live here and nowhere else
(`SERVER_APP`, `CLIENT_APP`, `INSTALLED_PACKAGES`). They are the names of this install: a
checkout imports its top-level folders as they are (`server`, `edge_client`...), and the wheel
installs every one but `dartfl` as `dartfl_<folder>` (`dartfl_server`, ...; scripts/dartfl_build.py
renames them and their imports when it builds the wheel), so that no installed name can
collide with other code. Which of the two this is, this module's own name says.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import dartfl
from dartfl.errors import ConfigError

__all__ = [
    "APP_FILE",
    "CLIENT_APP",
    "INSTALLED_PACKAGES",
    "PUBLISHER",
    "REPOSITORY_PACKAGES",
    "SERVER_APP",
    "WHEEL_PREFIX",
    "app_table",
    "default_run_config",
    "toml_value",
    "write_app",
]

# The repository's top-level folders (pyproject.toml's packages.find lists the same).
REPOSITORY_PACKAGES = (
    "dartfl",
    "workloads",
    "fltask",
    "messaging",
    "edge_client",
    "server",
    "dashboard",
    "orchestration",
    "ray_engine",
)
# What the wheel puts before every folder's name but `dartfl`'s (scripts/dartfl_build.py).
WHEEL_PREFIX = "dartfl_"
# "" in a checkout, WHEEL_PREFIX in the wheel: this module is orchestration.flower_app there.
_PREFIX = __name__.removesuffix("orchestration.flower_app")
# The top-level import names of this install.
INSTALLED_PACKAGES = tuple(name if name == "dartfl" else _PREFIX + name for name in REPOSITORY_PACKAGES)
# The Flower components, as `module:attribute` of this install.
SERVER_APP = f"{_PREFIX}server.server_app:app"
CLIENT_APP = f"{_PREFIX}edge_client.client_app:app"
PUBLISHER = "dartfl"
APP_FILE = "pyproject.toml"

_HEADER = """\
# A Flower app for DART-FL {version}, written by `dartfl fl app`. It carries no code: the
# ServerApp ({server}) and the ClientApp ({client})
# are those of the dartfl installed where they run: install dartfl {version} on the server
# and on every device.
#
# Run it with the venv active (Flower starts `flower-superlink` from PATH):
#   flwr run . --stream                                   # a local simulation
#   flwr run . --stream --run-config 'num-server-rounds=3 policy="inference-first"'
# Every key of [tool.flwr.app.config] is described in DART-FL's docs/fl-config.md.
"""


def default_run_config() -> dict[str, int | float | str]:
    """The run config's defaults: those of fltask.config.FlConfig, the one parser of it."""
    from fltask.config import FlConfig

    return FlConfig().to_run_config()


def app_table(overrides: Mapping[str, int | float | str] | None = None) -> dict[str, object]:
    """`[tool.flwr.app]` of the app: publisher, components and config (defaults < `overrides`);
    ConfigError for an unknown key or a bad value."""
    return {
        "publisher": PUBLISHER,
        "components": {"serverapp": SERVER_APP, "clientapp": CLIENT_APP},
        "config": _run_config(overrides),
    }


def _run_config(overrides: Mapping[str, int | float | str] | None) -> dict[str, int | float | str]:
    from fltask.config import FlConfig

    config = default_run_config()
    unknown = sorted(set(overrides or {}) - set(config))
    if unknown:
        raise ConfigError(f"unknown run-config key(s) {unknown}; valid: {', '.join(sorted(config))}")
    return FlConfig.from_run_config({**config, **(overrides or {})}).to_run_config()


def write_app(directory: Path, overrides: Mapping[str, int | float | str] | None = None) -> Path:
    """Write the app's pyproject.toml into `directory` (made if missing); returns `directory`."""
    config = _run_config(overrides)
    lines = [
        _HEADER.format(version=dartfl.__version__, server=SERVER_APP, client=CLIENT_APP),
        "[project]",
        'name = "dartfl"',
        f"version = {toml_value(dartfl.__version__)}",
        'description = "DART-FL: federated multitask training co-scheduled with live inference"',
        'license = "Apache-2.0"',
        "dependencies = []  # none installed at run time: the hosts have dartfl already",
        "",
        "[tool.flwr.app]",
        f"publisher = {toml_value(PUBLISHER)}",
        'fab-include = ["pyproject.toml"]',
        "",
        "[tool.flwr.app.components]",
        f"serverapp = {toml_value(SERVER_APP)}",
        f"clientapp = {toml_value(CLIENT_APP)}",
        "",
        "[tool.flwr.app.config]",
    ]
    lines += [f"{key} = {toml_value(value)}" for key, value in config.items()]
    directory.mkdir(parents=True, exist_ok=True)
    (directory / APP_FILE).write_text("\n".join([*lines, ""]), encoding="utf-8")
    return directory


def toml_value(value: int | float | str | bool) -> str:
    """A TOML literal of a scalar (strings double-quoted and escaped)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
