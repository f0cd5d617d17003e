"""scripts/dartfl_build.py adds the files that live outside every package (the systemd units)
to the wheel. Hermetic: a tiny wheel and source tree; tests/test_wheel_contents.py checks the
real wheel and the one built from the sdist."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "dartfl_build.py"
sys.path.insert(0, str(SCRIPT.parent))
import dartfl_build  # noqa: E402 (the script's folder is not a package)


def _tiny_wheel(path: Path) -> Path:
    wheel = path / "demo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("dartfl/__init__.py", "")
        zf.writestr("server/__init__.py", "")
        zf.writestr("demo-1.0.dist-info/top_level.txt", "dartfl\nserver\n")
        zf.writestr("demo-1.0.dist-info/RECORD", "")
    return wheel


def test_the_units_land_in_dartfl_and_in_the_record(tmp_path: Path) -> None:
    units = tmp_path / "src" / "deploy" / "systemd"
    units.mkdir(parents=True)
    (units / "a.service").write_text("[Unit]\n")
    (units / "notes.txt").write_text("not a unit\n")
    wheel = _tiny_wheel(tmp_path)
    dartfl_build.add_shipped_files(wheel, tmp_path / "src")
    dartfl_build.rename_wheel(wheel)
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        record = zf.read("demo-1.0.dist-info/RECORD").decode()
        assert zf.read("dartfl/deploy/systemd/a.service") == b"[Unit]\n"
    assert "dartfl/deploy/systemd/notes.txt" not in names
    assert "dartfl_server/__init__.py" in names  # the rename still applies
    assert any(line.startswith("dartfl/deploy/systemd/a.service,sha256=") for line in record.splitlines())


def test_a_source_tree_without_the_units_builds_a_wheel_without_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A partial copy of the tree (tests/messaging/test_broker_setup.py builds one) still builds;
    # the build says what it left out.
    (tmp_path / "src").mkdir()
    wheel = _tiny_wheel(tmp_path)
    dartfl_build.add_shipped_files(wheel, tmp_path / "src")
    with zipfile.ZipFile(wheel) as zf:
        assert not [n for n in zf.namelist() if n.startswith("dartfl/deploy/")]
    assert "no *.service; the wheel ships none" in caplog.text
