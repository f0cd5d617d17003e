"""The wheel and the fresh venv it is installed into, for tests/test_wheel_contents.py and
tests/test_wheel_commands.py: built once a session from a copy of the checkout (without what
never ships), installed outside the repository.

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

import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

import dartfl
from orchestration.flower_app import REPOSITORY_PACKAGES, WHEEL_PREFIX
from tests import install_fixtures as inst

# The names the wheel installs, and the repository's names it must not install.
WHEEL_PACKAGES = tuple(n if n == "dartfl" else WHEEL_PREFIX + n for n in REPOSITORY_PACKAGES)
RENAMED = frozenset(REPOSITORY_PACKAGES) - {"dartfl"}

ROOT = Path(__file__).resolve().parents[1]
# What the wheel is built from: the checkout without what never ships.
NOT_SHIPPED = (".git", ".venv", "build", "dist", "out", "test-artifacts", "tests", "benchmarks")
CACHES = ("__pycache__", "*.egg-info", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis")


def loopback_only() -> bool:
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
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(*NOT_SHIPPED, *CACHES), symlinks=True)
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


def without_pythonpath() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="session")
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
        env=without_pythonpath(),
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


def top_level_of(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as zf:
        return {n.split("/")[0] for n in zf.namelist() if not n.split("/")[0].endswith(".dist-info")}
