"""scripts/cross_pip.py resolves for the target machine, markers included.

pip's --platform options pick the target's wheels but evaluate markers with the host's values
(pypa/pip#10050); make test-arm64 relies on the wrapper to pick torch's aarch64 pin and leave
out what only x86_64 needs. Checked hermetically: a throwaway package whose dependencies are
split by `platform_machine`, resolved offline from a folder of tiny wheels.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "cross_pip.py"
sys.path.insert(0, str(SCRIPT.parent))
import cross_pip  # noqa: E402 (the script's folder is not a package)


def _wheel(folder: Path, name: str, requires: list[str]) -> None:
    """A minimal pure-Python wheel of `name` 1.0 with these Requires-Dist lines."""
    info = f"{name}-1.0.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n"
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
    wheel = "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    with zipfile.ZipFile(folder / f"{name}-1.0-py3-none-any.whl", "w") as z:
        z.writestr(f"{name}.py", "")
        z.writestr(f"{info}/METADATA", metadata)
        z.writestr(f"{info}/WHEEL", wheel)
        z.writestr(f"{info}/RECORD", "")


def _resolve(machine: str, wheels: Path, report: Path) -> set[str]:
    target = ["--machine", machine, "--python", "3.11", "--glibc", "2.36"]
    pip = ["install", "--dry-run", "--ignore-installed", "--no-index", "--find-links", str(wheels)]
    out = subprocess.run(
        [sys.executable, str(SCRIPT), *target, "--", *pip, "--quiet", "--report", str(report), "app"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"PIP_CONFIG_FILE": "/dev/null", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return {item["metadata"]["name"] for item in json.loads(report.read_text())["install"]}


@pytest.mark.parametrize(
    ("machine", "wanted", "unwanted"), [("aarch64", "armdep", "x86dep"), ("x86_64", "x86dep", "armdep")]
)
def test_markers_are_evaluated_for_the_target_machine(
    tmp_path: Path, machine: str, wanted: str, unwanted: str
) -> None:
    _wheel(tmp_path, "app", ['armdep; platform_machine == "aarch64"', 'x86dep; platform_machine == "x86_64"'])
    _wheel(tmp_path, "armdep", [])
    _wheel(tmp_path, "x86dep", [])
    names = _resolve(machine, tmp_path, tmp_path / "report.json")
    assert wanted in names
    assert unwanted not in names


def test_every_manylinux_tag_up_to_the_target_glibc_is_listed() -> None:
    tags = cross_pip.manylinux_platforms("aarch64", "2.36")
    assert tags[0] == "manylinux_2_36_aarch64"
    assert "manylinux_2_27_aarch64" in tags  # some NVIDIA and numpy wheels carry only 2_27/2_28
    assert tags[-2:] == ["manylinux_2_17_aarch64", "manylinux2014_aarch64"]
    assert len(tags) == 36 - 17 + 2


def test_a_glibc_older_than_manylinux_is_refused() -> None:
    with pytest.raises(SystemExit, match=r"2\.17 or newer"):
        cross_pip.manylinux_platforms("aarch64", "2.12")
