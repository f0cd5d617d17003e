"""scripts/dartfl_build.py renames the wheel's packages and exactly their imports.

Hermetic: import statements rewritten from source text, and a tiny wheel renamed in place
whose RECORD must then match what it holds. tests/wheel_fixtures.py builds the real wheel.
"""

from __future__ import annotations

import base64
import hashlib
import sys
import zipfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "dartfl_build.py"
sys.path.insert(0, str(SCRIPT.parent))
import dartfl_build  # noqa: E402 (the script's folder is not a package)

RENAMED = frozenset({"server", "workloads", "ray_engine"})


def test_from_imports_of_renamed_packages_point_at_the_prefixed_names() -> None:
    source = "from server.rounds import run_round\nfrom   workloads import generate as g\n"
    assert dartfl_build.rewrite_imports(source, RENAMED) == (
        "from dartfl_server.rounds import run_round\nfrom   dartfl_workloads import generate as g\n"
    )


def test_a_plain_import_keeps_its_local_name() -> None:
    source = "def f():\n    import ray_engine, os\n    import workloads as w\n    return ray_engine, w\n"
    assert dartfl_build.rewrite_imports(source, RENAMED) == (
        "def f():\n    import dartfl_ray_engine as ray_engine, os\n"
        "    import dartfl_workloads as w\n    return ray_engine, w\n"
    )


def test_everything_but_imports_of_renamed_packages_is_left_alone() -> None:
    source = (
        '"""from server import x"""\n'
        "# import server\n"
        "from dartfl.cli import main\n"
        "from . import server\n"
        "from .server import y\n"
        "import serverless\n"
        'NAME = "server.rounds"\n'
        "s = 'é'; from server import z  # a non-ASCII byte before the import on its line\n"
    )
    out = dartfl_build.rewrite_imports(source, RENAMED)
    assert out == source.replace("from server import z", "from dartfl_server import z")


def test_an_import_that_binds_the_renamed_package_stops_the_build() -> None:
    with pytest.raises(dartfl_build.RenameError, match=r"x\.py:2: `import server\.rounds` binds `server`"):
        dartfl_build.rewrite_imports("import os\nimport server.rounds\n", RENAMED, "x.py")


def _record_ok(zf: zipfile.ZipFile, record_name: str) -> bool:
    for line in zf.read(record_name).decode().splitlines():
        name, digest, size = line.rsplit(",", 2)
        if name == record_name:
            continue
        data = zf.read(name)
        expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        if (digest, size) != (f"sha256={expected}", str(len(data))):
            return False
    return set(zf.namelist()) == {
        line.rsplit(",", 2)[0] for line in zf.read(record_name).decode().splitlines()
    }


def test_a_wheel_is_renamed_with_its_top_level_list_and_record(tmp_path: Path) -> None:
    wheel = tmp_path / "demo-1.0-py3-none-any.whl"
    info = "demo-1.0.dist-info"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("dartfl/__init__.py", "from server.rounds import run\n")
        zf.writestr("server/__init__.py", "")
        zf.writestr("server/rounds.py", "import dartfl\nfrom server import helpers\n")
        zf.writestr("server/data/table.csv", "a,b\n")
        zf.writestr(f"{info}/top_level.txt", "dartfl\nserver\n")
        zf.writestr(f"{info}/RECORD", "stale\n")
    dartfl_build.rename_wheel(wheel)
    with zipfile.ZipFile(wheel) as zf:
        assert sorted(zf.namelist()) == sorted(
            [
                "dartfl/__init__.py",
                "dartfl_server/__init__.py",
                "dartfl_server/rounds.py",
                "dartfl_server/data/table.csv",
                f"{info}/top_level.txt",
                f"{info}/RECORD",
            ]
        )
        assert zf.read("dartfl/__init__.py") == b"from dartfl_server.rounds import run\n"
        assert zf.read("dartfl_server/rounds.py") == b"import dartfl\nfrom dartfl_server import helpers\n"
        assert zf.read(f"{info}/top_level.txt").decode().split() == ["dartfl", "dartfl_server"]
        assert zf.namelist()[-1] == f"{info}/RECORD"
        assert _record_ok(zf, f"{info}/RECORD")
