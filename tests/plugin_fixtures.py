"""Policy plugins as an installed package presents them (docs/plugins.md): a module on the
path and a dist-info directory whose entry_points.txt names an object under the
`dartfl.policies` group, which is what `pip install` leaves behind."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from dartfl.policies.plugins import PLUGIN_GROUP

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "policy_plugin"


def write_plugin(root: Path, package: str, points: dict[str, str], module: str, source: str) -> Path:
    """Install, by hand, `package` 0.1 with `module`.py (`source`) and the entry points
    `points` (name -> "module:object") into `root`; `root` is returned, for the path."""
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{package.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.1\n")
    lines = "".join(f"{name} = {value}\n" for name, value in points.items())
    (info / "entry_points.txt").write_text(f"[{PLUGIN_GROUP}]\n{lines}")
    return root


def install_example(target: Path) -> Path:
    """`pip install --target` the example package of examples/policy_plugin (no index), built
    from a copy: setuptools leaves build/ and *.egg-info beside the sources it builds."""
    with tempfile.TemporaryDirectory() as scratch:
        source = shutil.copytree(EXAMPLE, Path(scratch) / "policy_plugin")
        pip = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
        ]
        subprocess.run([*pip, "--target", str(target), str(source)], check=True, capture_output=True)
    return target


def on_path(monkeypatch: pytest.MonkeyPatch, root: Path, *modules: str) -> None:
    """Put `root` first on sys.path for this test, and forget `modules` after it."""
    monkeypatch.syspath_prepend(str(root))
    for module in modules:
        monkeypatch.delitem(sys.modules, module, raising=False)
