"""The build backend: setuptools, then the wheel's top-level packages renamed so none can collide.

The repository keeps the design's top-level folders (`server`, `dashboard`, `workloads`...) and
imports them by those names, which is what a checkout, an editable install and the tests use.
Installed beside other code, such names collide (another project's `server` shadows ours, or
ours theirs). So the wheel installs every top-level package but `dartfl` as `dartfl_<name>`
(`dartfl_server`, `dartfl_dashboard`...), and rewrites the absolute imports of those packages in
every module it ships to match:

    from server.rounds import X      ->  from dartfl_server.rounds import X
    import ray_engine                ->  import dartfl_ray_engine as ray_engine
    import workloads as w            ->  import dartfl_workloads as w

Only import statements change, found by Python's own parser (never by a text search), so a
comment, a string or a name that merely looks like a package is left alone; the few places that
name a package in a string derive it from their own `__name__` or a module object instead
(orchestration/flower_app.py). `import server.rounds` (which binds `server`) cannot be renamed
in place and stops the build with the line to change. tests/test_wheel_contents.py checks the
result: every shipped module imports in a fresh venv that has no module of the old names.

The wheel also ships files that live outside every package: the systemd units of
deploy/systemd, as `dartfl/deploy/systemd/*.service` (`SHIPPED_FILES`), since a wheel install
has no checkout to copy them from (docs/deployment.md, section 2).

sdists and editable installs are setuptools' own: the sdist is the repository's layout (its
wheel is built by this backend), and an editable install is a checkout's names.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import io
import logging
import zipfile
from pathlib import Path

from setuptools import build_meta as _setuptools
from setuptools.build_meta import (
    build_editable,
    build_sdist,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

__all__ = [
    "PREFIX",
    "SHIPPED_FILES",
    "add_shipped_files",
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "prepare_metadata_for_build_editable",
    "prepare_metadata_for_build_wheel",
    "rename_wheel",
    "rewrite_imports",
]

log = logging.getLogger(__name__)

PREFIX = "dartfl_"  # orchestration.flower_app.WHEEL_PREFIX says the same
KEPT = "dartfl"  # the one package installed under its own name
# Files outside any package that the wheel carries: (folder of the source tree, glob, folder in
# the wheel). Inside `dartfl`, which is never renamed, so `importlib.resources.files("dartfl")`
# finds them; MANIFEST.in puts them in the sdist, whose wheel must be the same.
SHIPPED_FILES = (("deploy/systemd", "*.service", f"{KEPT}/deploy/systemd"),)


class RenameError(Exception):
    """A module the wheel cannot ship renamed; the message names the file, the line and the fix."""


def build_wheel(
    wheel_directory: str,
    config_settings: dict[str, str | list[str]] | None = None,
    metadata_directory: str | None = None,
) -> str:
    name: str = _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)
    add_shipped_files(Path(wheel_directory) / name, Path.cwd())  # PEP 517 runs hooks in the source tree
    rename_wheel(Path(wheel_directory) / name)  # which also writes RECORD for the added files
    return name


def add_shipped_files(wheel: Path, source: Path) -> None:
    """Append SHIPPED_FILES from the tree at `source` to `wheel` (RECORD is rename_wheel's job)."""
    with zipfile.ZipFile(wheel, "a") as zf:
        present = set(zf.namelist())
        for folder, pattern, target in SHIPPED_FILES:
            files = sorted((source / folder).glob(pattern))
            if not files:
                # A partial tree (a test's copy of the packages alone) builds a wheel without them;
                # tests/test_wheel_contents.py checks that the checkout's and the sdist's have them.
                log.warning("%s: no %s; the wheel ships none", source / folder, pattern)
            for path in files:
                name = f"{target}/{path.name}"
                if name in present:
                    raise FileExistsError(f"{wheel.name} already holds {name}")
                info = zipfile.ZipInfo.from_file(path, name, strict_timestamps=False)
                info.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(info, path.read_bytes())


def rewrite_imports(source: str, renamed: frozenset[str], filename: str = "<module>") -> str:
    """`source` with every absolute import of a package in `renamed` pointing at PREFIX + it."""
    tree = ast.parse(source, filename)
    lines = io.StringIO(source, newline="").readlines()  # split where Python's parser counts lines
    edits: list[tuple[int, int, int, str]] = []  # (line index, start, end, text), byte columns
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                head, dot, _ = alias.name.partition(".")
                if head not in renamed:
                    continue
                if dot and alias.asname is None:
                    raise RenameError(
                        f"{filename}:{alias.lineno}: `import {alias.name}` binds `{head}`, which the "
                        f"wheel renames; write `from {alias.name.rpartition('.')[0]} import "
                        f"{alias.name.rpartition('.')[2]}` instead"
                    )
                if alias.end_lineno != alias.lineno or alias.end_col_offset is None:
                    raise RenameError(f"{filename}:{alias.lineno}: `import {alias.name}` spans lines")
                text = f"{PREFIX}{alias.name} as {alias.asname or alias.name}"
                edits.append((alias.lineno - 1, alias.col_offset, alias.end_col_offset, text))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            head = node.module.partition(".")[0]
            if head not in renamed:
                continue
            line = lines[node.lineno - 1].encode()
            start = node.col_offset + len("from")
            while line[start : start + 1] in (b" ", b"\t"):
                start += 1
            if not line[start:].startswith(node.module.encode()):
                raise RenameError(
                    f"{filename}:{node.lineno}: `from {node.module} import ...` must name its "
                    "module on the line of its `from`"
                )
            edits.append((node.lineno - 1, start, start + len(head), PREFIX + head))
    for index, start, end, text in sorted(edits, reverse=True):
        line = lines[index].encode()
        lines[index] = (line[:start] + text.encode() + line[end:]).decode()
    return "".join(lines)


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def rename_wheel(wheel: Path) -> None:
    """Rewrite `wheel` in place: top-level packages renamed, their imports, top_level.txt, RECORD."""
    with zipfile.ZipFile(wheel) as zf:
        entries = [(info, zf.read(info)) for info in zf.infolist()]
    tops = {info.filename.split("/")[0] for info, _ in entries if "/" in info.filename}
    renamed = frozenset(t for t in tops if t != KEPT and not t.endswith((".dist-info", ".data")))
    out: list[tuple[zipfile.ZipInfo, bytes]] = []
    record_name = ""
    for info, data in entries:
        head, sep, rest = info.filename.partition("/")
        name = f"{PREFIX}{head}{sep}{rest}" if head in renamed else info.filename
        if name.endswith(".py"):
            data = rewrite_imports(data.decode("utf-8"), renamed, name).encode("utf-8")
        elif head.endswith(".dist-info") and rest == "top_level.txt":
            listed = data.decode().split()
            data = "".join(f"{PREFIX}{t}\n" if t in renamed else f"{t}\n" for t in listed).encode()
        elif head.endswith(".dist-info") and rest == "RECORD":
            record_name = name
            continue  # written last, from what the wheel now holds
        new = zipfile.ZipInfo(name, date_time=info.date_time)
        new.compress_type = info.compress_type
        new.external_attr = info.external_attr
        out.append((new, data))
    if not record_name:
        raise RenameError(f"{wheel.name} has no RECORD")
    record = [_record_line(info.filename, data) for info, data in out] + [f"{record_name},,"]
    record_info = zipfile.ZipInfo(record_name, date_time=out[-1][0].date_time)
    record_info.compress_type = zipfile.ZIP_DEFLATED
    out.append((record_info, ("\n".join(record) + "\n").encode()))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for info, data in out:
            zf.writestr(info, data)
    wheel.write_bytes(buf.getvalue())
