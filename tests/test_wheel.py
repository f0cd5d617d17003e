"""The wheel, installed like any package: built from a copy of the checkout, installed into a fresh
venv outside the repository, it runs `dartfl sim`, `dartfl fl sim`, `dartfl edge run` (its own
Mosquitto, one request answered) and `dartfl dashboard` from a directory that is not the
checkout, with PYTHONPATH cleared, and what runs is the wheel's code, Flower's ServerApp too.

The fresh venv gets the wheel with `pip install --no-deps`, and its third-party dependencies
without downloading them: a folder of links to exactly the distributions that the wheel's
requirements (every published extra) pull in from this venv, added to its sys.path by a .pth
file, with their console scripts written into its bin/. Neither this project's editable
install nor anything outside that closure is visible in it, so `pip check` there says whether
the closure is consistent, and a module that exists both in the wheel and in a dependency is a
collision. The wheel installs `dartfl` and every other top-level folder of the repository as
`dartfl_<folder>` (scripts/dartfl_build.py), so no installed name can collide with other code;
every import of the shipped modules points at those names, and nothing in the fresh venv
imports a module by a repository folder's name.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import dartfl
from orchestration.flower_app import REPOSITORY_PACKAGES, WHEEL_PREFIX
from tests import install_fixtures as inst

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# The names the wheel installs, and the repository's names it must not install.
WHEEL_PACKAGES = tuple(n if n == "dartfl" else WHEEL_PREFIX + n for n in REPOSITORY_PACKAGES)
RENAMED = frozenset(REPOSITORY_PACKAGES) - {"dartfl"}

ROOT = Path(__file__).resolve().parents[1]
# What the wheel is built from: the checkout without what never ships.
_NOT_SHIPPED = (".git", ".venv", "build", "dist", "out", "test-artifacts", "tests", "benchmarks")
_CACHES = ("__pycache__", "*.egg-info", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis")


def _loopback_only() -> bool:
    lines = Path("/proc/net/dev").read_text().splitlines()[2:]
    return sorted(line.split(":")[0].strip() for line in lines) == ["lo"]


@dataclass(frozen=True)
class FreshVenv:
    root: Path
    site: Path  # its site-packages, where the wheel goes
    deps: Path  # the links to the dependency closure
    env: dict[str, str]  # an activated venv's environment, PYTHONPATH cleared
    cwd: Path  # outside the repository
    store: Path

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    def run(self, *args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bin / args[0]), *args[1:]],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )


def _build_wheel(out: Path) -> Path:
    src = out / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(*_NOT_SHIPPED, *_CACHES), symlinks=True)
    # No build isolation: the build backend (setuptools) comes from this venv, not the index.
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index"]
    done = subprocess.run(
        [*cmd, "-w", str(out / "dist"), str(src)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    shutil.rmtree(src)
    [wheel] = (out / "dist").glob("dartfl-*.whl")
    return wheel


def _link_closure(deps: Path, closure: inst.Closure) -> set[str]:
    """Link every top-level entry of the closure's distributions into `deps`; their names."""
    deps.mkdir()
    names: set[str] = set()
    for dist in closure.dists.values():
        for entry in inst.top_level_entries(dist):
            target = Path(str(dist.locate_file(entry)))
            link = deps / entry
            if target.exists() and not link.exists():
                link.symlink_to(target)
            names.add(entry)
    return names


def _write_console_scripts(bin_dir: Path, python: Path, closure: inst.Closure) -> None:
    """What pip would write for the closure's console scripts (flwr, flower-superlink, streamlit...)."""
    for dist in closure.dists.values():
        for ep in dist.entry_points.select(group="console_scripts"):
            module, _, attr = ep.value.partition(":")
            head, _, rest = attr.strip().partition(".")
            call = f"{head}.{rest}" if rest else head
            script = bin_dir / ep.name
            script.write_text(
                f"#!{python}\nimport sys\nfrom {module.strip()} import {head}\n"
                f"if __name__ == '__main__':\n    sys.exit({call}())\n"
            )
            script.chmod(0o755)


def _without_pythonpath() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> FreshVenv:
    base = tmp_path_factory.mktemp("fresh")
    root = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    python = root / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
    )  # fmt: skip
    pip = [sys.executable, "-m", "pip", "--python", str(python)]
    # Without PYTHONPATH: a checkout on it that holds a dartfl.egg-info (left by an in-tree
    # `make wheel`) makes pip call dartfl installed already and install nothing.
    done = subprocess.run(
        [*pip, "install", "--no-deps", "--no-index", str(wheel)], capture_output=True, text=True,
        env=_without_pythonpath(),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert (site / f"dartfl-{dartfl.__version__}.dist-info").is_dir(), done.stdout[-2000:]
    requires, extras = _wheel_requirements(wheel)
    closure = inst.requirement_closure(requires, extras)
    assert closure.problems == []
    deps = root / "deps"
    _link_closure(deps, closure)
    (site / "_dartfl_test_deps.pth").write_text(f"{deps}\n")
    _write_console_scripts(root / "bin", python, closure)
    home, cwd = base / "home", base / "elsewhere"
    home.mkdir()
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    store = base / "runs.sqlite"
    env.update(
        {
            "PATH": f"{root / 'bin'}:/usr/local/bin:/usr/bin:/bin",
            "VIRTUAL_ENV": str(root),
            "HOME": str(home),
            "DARTFL_STORE": str(store),
            "PYTHONNOUSERSITE": "1",
        }
    )
    return FreshVenv(root, site, deps, env, cwd, store)


def _wheel_requirements(wheel: Path) -> tuple[list[str], list[str]]:
    with zipfile.ZipFile(wheel) as zf:
        [meta] = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        text = zf.read(meta).decode()
    requires = [
        line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Requires-Dist:")
    ]
    extras = [
        line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Provides-Extra:")
    ]
    return requires, extras


def _top_level_of(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as zf:
        return {n.split("/")[0] for n in zf.namelist() if not n.split("/")[0].endswith(".dist-info")}


# --------------------------------------------------------------------------- what ships


def test_the_wheel_installs_exactly_the_expected_top_level_names_and_its_data(wheel: Path) -> None:
    assert _top_level_of(wheel) == set(WHEEL_PACKAGES)
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


def test_every_installed_name_is_the_projects_own(wheel: Path) -> None:
    # `server`, `dashboard`, `workloads` and the rest would collide with other code in one
    # environment; the wheel installs them as dartfl_server, dartfl_dashboard...
    assert all(name == "dartfl" or name.startswith(WHEEL_PREFIX) for name in _top_level_of(wheel))


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
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(*_NOT_SHIPPED, *_CACHES), symlinks=True)
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
    assert provided & _top_level_of(wheel) == set()


def test_the_fresh_venv_is_consistent_by_pip_check(fresh: FreshVenv) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(fresh.bin / "python"), "check"],
        capture_output=True, text=True, timeout=120, env=_without_pythonpath(),
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


# --------------------------------------------------------------------------- the commands


def test_sim_runs_on_the_bundled_trace_and_records(fresh: FreshVenv) -> None:
    trace = fresh.site / "dartfl_workloads" / "data" / "azure_llm_conv_2023.csv"
    done = fresh.run(
        "dartfl", "sim", "--trace", str(trace), "--duration-s", "120", "--target-load", "0.5",
        "--profile", "pi4", "--policy", "dart", "--policy", "inference-first", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(done.stdout)["results"]
    assert [r["policy"] for r in results][:2] == ["dart", "inference-first"]
    assert fresh.store.is_file()
    listed = fresh.run("dartfl", "runs", "list", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout)


@pytest.mark.skipif(not _loopback_only(), reason="Ray needs a loopback-only namespace: scripts/loopback-run")
def test_fl_sim_runs_the_packaged_app_on_the_wheels_code(fresh: FreshVenv) -> None:
    done = fresh.run(
        "dartfl", "fl", "sim", "--clients", "2", "--rounds", "2", "--policy", "dart", "--json",
        "--set", "max-train-per-task=400", "--set", "max-test-per-task=200", "--set", "favourite-tasks=",
        timeout_s=400,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    [result] = json.loads(done.stdout)["results"]
    assert result["rounds"] == 2 and [h["replies"] for h in result["history"]] == [2, 2]
    # Flower's ServerApp process said where it was imported from: the wheel.
    origin = re.search(r"ServerApp \((\S+server_app\.py)\)", done.stderr)
    assert origin is not None, done.stderr[-3000:]
    assert Path(origin.group(1)).is_relative_to(fresh.site)
    assert re.search(r"round 2/2: updates from 2 of 2 nodes", done.stderr)


def test_edge_run_serves_a_request_through_its_own_mosquitto(fresh: FreshVenv, tmp_path: Path) -> None:
    from dartfl.profiles import get_profile, profile_to_toml
    from tests.messaging.mqtt_fixtures import ask_then_stop

    profile = tmp_path / "x86.toml"
    profile.write_text(profile_to_toml(get_profile("x86-1core")))
    args = ["edge", "run", "--device", "wheel", "--tasks", "digits", "--max-train", "200"]
    args += ["--publish-every-s", "0", "--profile-file", str(profile)]
    agent = subprocess.Popen(
        [str(fresh.bin / "dartfl"), *args], cwd=fresh.cwd, env=fresh.env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    _, reply, out, err = ask_then_stop(agent, "wheel", timeout_s=180)
    assert reply.status == "ok" and reply.label is not None
    assert agent.returncode == 0, err[-2000:]
    report = json.loads(out.strip().splitlines()[-1])
    assert report["device"] == "wheel"


@pytest.fixture
def dashboard(fresh: FreshVenv) -> Iterator[tuple[subprocess.Popen[str], int]]:
    from messaging.brokers import free_port

    if not fresh.store.exists():  # the sim test records one; alone, record one here
        assert (
            fresh.run("dartfl", "sim", "--workload", "poisson", "--duration-s", "20", "--json").returncode
            == 0
        )
    port = free_port()
    proc = subprocess.Popen(
        [str(fresh.bin / "dartfl"), "dashboard", "--port", str(port)], cwd=fresh.cwd, env=fresh.env,
        text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        yield proc, port
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_dashboard_serves_the_wheels_app_on_loopback(
    fresh: FreshVenv, dashboard: tuple[subprocess.Popen[str], int]
) -> None:
    proc, port = dashboard
    deadline = time.monotonic() + 90
    health = ""
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as answer:
                health = answer.read().decode()
                break
        except OSError:
            time.sleep(0.5)
    assert health == "ok", proc.stdout.read() if proc.stdout and proc.poll() is not None else "no answer"
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as page:
        assert page.status == 200 and "<title>" in page.read().decode().lower()
    # `dartfl dashboard` became Streamlit (exec); it runs the wheel's dashboard/app.py.
    argv = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
    [app] = [Path(a.decode()) for a in argv if a.endswith(b"app.py")]
    assert app.is_relative_to(fresh.site / "dartfl_dashboard")
