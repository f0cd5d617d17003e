"""What the wheel ships: exactly the expected top-level names (all the project's own) and its
data (the systemd units and the licenses included), no shipped module importing or naming a
repository folder, the same wheel built from the sdist, a fresh venv that pip check calls
consistent, and every module imported from the wheel and nothing from the checkout (the wheel
and the venv: tests/wheel_fixtures.py)."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import dartfl
from orchestration.flower_app import WHEEL_PREFIX
from tests.wheel_fixtures import (
    CACHES,
    NOT_SHIPPED,
    RENAMED,
    ROOT,
    WHEEL_PACKAGES,
    FreshVenv,
    top_level_of,
    without_pythonpath,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_the_wheel_installs_exactly_the_expected_top_level_names_and_its_data(wheel: Path) -> None:
    assert top_level_of(wheel) == set(WHEEL_PACKAGES)
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        top_level = zf.read(f"dartfl-{dartfl.__version__}.dist-info/top_level.txt").decode().split()
    assert sorted(top_level) == sorted(WHEEL_PACKAGES)
    assert "dartfl_workloads/data/azure_llm_conv_2023.csv" in names  # the bundled trace
    assert {
        "dartfl_messaging/mosquitto/dartfl.conf.template",
        "dartfl_messaging/mosquitto/acl.template",
    } <= names
    assert "dartfl_dashboard/app.py" in names
    units = {p.name for p in (ROOT / "deploy" / "systemd").glob("*.service")}
    assert {"dartfl-agent.service", "dartfl-supernode.service", "dartfl-superlink.service"} <= units
    assert {f"dartfl/deploy/systemd/{unit}" for unit in units} <= names


def test_the_wheel_carries_its_licenses_and_the_traces_attribution(wheel: Path) -> None:
    # The bundled Azure trace is CC-BY-4.0: its attribution (workloads/data/README.md) travels
    # with it, and the metadata names both licenses.
    info = f"dartfl-{dartfl.__version__}.dist-info"
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        metadata = zf.read(f"{info}/METADATA").decode()
    assert "License-Expression: Apache-2.0 AND CC-BY-4.0" in metadata.splitlines()
    assert {f"{info}/licenses/LICENSE", f"{info}/licenses/workloads/data/README.md"} <= names


def test_the_installed_wheel_gives_the_systemd_units_where_the_docs_say(fresh: FreshVenv) -> None:
    # docs/deployment.md, section 2: a wheel install has no deploy/ folder to copy them from, so
    # they come out of the installed package, by this very command.
    code = "from importlib.resources import files; print(files('dartfl') / 'deploy/systemd')"
    done = fresh.run("python", "-c", code)
    assert done.returncode == 0, done.stderr
    installed = Path(done.stdout.strip())
    assert installed.is_relative_to(fresh.site)
    ours = {p.name: p.read_bytes() for p in (ROOT / "deploy" / "systemd").glob("*.service")}
    assert {p.name: p.read_bytes() for p in installed.glob("*.service")} == ours


def test_every_installed_name_is_the_projects_own(wheel: Path) -> None:
    # `server`, `dashboard`, `workloads` and the rest would collide with other code in one
    # environment; the wheel installs them as dartfl_server, dartfl_dashboard...
    assert all(name == "dartfl" or name.startswith(WHEEL_PREFIX) for name in top_level_of(wheel))


def _imported_modules(tree: ast.Module) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module


def test_no_shipped_module_imports_or_names_a_repository_folder(wheel: Path) -> None:
    # Imports inside functions too, which importing a module does not run. A string naming a
    # module (`"server.x:app"`) is a reference no rewrite sees: only flower_app builds them,
    # from its own name.
    bad = []
    with zipfile.ZipFile(wheel) as zf:
        for name in (n for n in zf.namelist() if n.endswith(".py")):
            tree = ast.parse(zf.read(name), name)
            bad += [
                (name, line, mod) for line, mod in _imported_modules(tree) if mod.split(".")[0] in RENAMED
            ]
            if name == "dartfl_orchestration/flower_app.py":
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    head = re.match(r"([a-z_]+)[.:][a-z_]", node.value)
                    if head and head.group(1) in RENAMED:
                        bad.append((name, node.lineno, node.value))
    assert bad == []


def test_the_wheels_flower_components_are_its_own(fresh: FreshVenv) -> None:
    code = "from dartfl_orchestration import flower_app as f; print(f.SERVER_APP, f.CLIENT_APP)"
    done = fresh.run("python", "-c", code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["dartfl_server.server_app:app", "dartfl_edge_client.client_app:app"]


def test_a_wheel_built_from_the_sdist_is_the_same_renamed_wheel(wheel: Path, tmp_path: Path) -> None:
    # The sdist is the repository's layout and carries the build backend (MANIFEST.in), so pip
    # building from it (any install that is not from the wheel) gets the same names.
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(*NOT_SHIPPED, *CACHES), symlinks=True)
    build = (
        "import sys; sys.path.insert(0, 'scripts'); import dartfl_build; "
        "print(dartfl_build.build_sdist(sys.argv[1]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", build, str(tmp_path / "sdist")],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    sdist = tmp_path / "sdist" / done.stdout.strip().splitlines()[-1]
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index"]
    done = subprocess.run(
        [*cmd, "-w", str(tmp_path / "dist"), str(sdist)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    [again] = (tmp_path / "dist").glob("dartfl-*.whl")
    with zipfile.ZipFile(wheel) as first, zipfile.ZipFile(again) as second:
        assert sorted(first.namelist()) == sorted(second.namelist())


def test_no_dependency_provides_a_name_the_wheel_installs(fresh: FreshVenv, wheel: Path) -> None:
    provided = {p.name.removesuffix(".py") for p in fresh.deps.iterdir()}
    assert provided & top_level_of(wheel) == set()


def test_the_fresh_venv_is_consistent_by_pip_check(fresh: FreshVenv) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(fresh.bin / "python"), "check"],
        capture_output=True, text=True, timeout=120, env=without_pythonpath(),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "No broken requirements found" in done.stdout


def test_every_module_imports_from_the_wheel_and_nothing_from_the_checkout(
    fresh: FreshVenv, wheel: Path
) -> None:
    # Every shipped module but the dashboard's Streamlit script (it runs the page when imported);
    # then no module of a repository folder's own name is loaded, and none could be.
    with zipfile.ZipFile(wheel) as zf:
        modules = sorted(
            n.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
            for n in zf.namelist()
            if n.endswith(".py") and n != "dartfl_dashboard/app.py"
        )
    code = (
        "import importlib, importlib.util, json, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "print(json.dumps({'path': sys.path, "
        f"'origins': {{n: importlib.util.find_spec(n).origin for n in {list(WHEEL_PACKAGES)!r}}}, "
        f"'loaded': sorted(m for m in sys.modules if m.split('.')[0] in {sorted(RENAMED)!r}), "
        f"'findable': [n for n in {sorted(RENAMED)!r} if importlib.util.find_spec(n)]}}))"
    )
    done = fresh.run("python", "-c", code)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    for name, origin in seen["origins"].items():
        assert Path(origin).is_relative_to(fresh.site), (name, origin)
    # No sys.path entry in the checkout's source. The fresh venv's dependencies are links into
    # the venv running this test, which lives inside the checkout on a clean clone (.venv/):
    # those are the dependencies, not the source.
    deps, root = Path(sys.prefix).resolve(), ROOT.resolve()
    where = [Path(p).resolve() for p in seen["path"] if p]
    assert not [p for p in where if p.is_relative_to(root) and not p.is_relative_to(deps)]
    assert (seen["loaded"], seen["findable"]) == ([], [])


def test_dartfl_version_is_the_wheels(fresh: FreshVenv, wheel: Path) -> None:
    done = fresh.run("dartfl", "--version")
    assert (done.returncode, done.stdout.strip()) == (0, f"dartfl {dartfl.__version__}")
    assert wheel.name.startswith(f"dartfl-{dartfl.__version__}-")
    done = fresh.run("python", "-m", "dartfl", "--version")
    assert (done.returncode, done.stdout.strip()) == (0, f"dartfl {dartfl.__version__}"), done.stderr
