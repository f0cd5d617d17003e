"""Output paths checked before any work: the commands measure or simulate first and write
last, so a bad name found only then would throw the work away. Kept apart from the plotting
code so that checking a CSV or TOML path loads no plotting stack."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from dartfl.errors import ConfigError
from dartfl.files import exists_or_explain

__all__ = ["IMAGE_SUFFIXES", "check_image_path", "check_output_path", "plot_path"]

# What matplotlib writes with no extra packages; anything else fails in savefig, after the work.
IMAGE_SUFFIXES = (".png", ".pdf", ".svg", ".svgz", ".jpg", ".jpeg", ".tif", ".tiff", ".webp", ".eps", ".ps")


def check_image_path(path: Path, flag: str) -> Path:
    """`check_output_path` for a plot: the suffix must also name a format matplotlib writes."""
    check_output_path(path, flag, "plot.png")
    if path.suffix.lower() not in IMAGE_SUFFIXES:
        formats = ", ".join(s[1:] for s in IMAGE_SUFFIXES)
        raise ConfigError(
            f"{flag} {path}: the file name must end in an image format ({formats}), "
            f"e.g. {path.with_suffix('.png')}"
        )
    return path


def check_output_path(path: Path, flag: str, example_name: str) -> Path:
    """Fail with the reason before any work if `path` cannot be written later.

    The commands measure or simulate first and write last; a bad name found only then
    throws the work away. example_name is the file name suggested inside a directory.
    """
    exists_or_explain(path, flag)  # a name too long fails every later look-up with a traceback
    if path.is_dir():
        raise ConfigError(
            f"{flag} {path} is a directory; give a file name inside it, e.g. {path / example_name}"
        )
    folder = _nearest_existing(path.parent)
    if not folder.is_dir():
        raise ConfigError(f"{flag} {path}: {folder} is a file, so no directory can be made there")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag} {path}: cannot write into {folder}; pick a writable directory")
    if path.exists() and not os.access(path, os.W_OK):
        raise ConfigError(f"{flag} {path} exists and is read-only; remove it or pick another name")
    _probe(path, folder, flag)
    return path


def _probe(path: Path, folder: Path, flag: str) -> None:
    """Open a file where the output goes, as the writer will: the permission bits above are
    what root passes everywhere, and a place that takes no new file (/proc) tells only when a
    file is made. An existing output is opened to append, so nothing in it changes; otherwise
    a temporary file in the folder is made and removed. What fails only on writing (a full
    disk, /dev/full) is left to the writer's own one-line error."""
    import tempfile

    try:
        if path.exists():
            where = str(path)
            with path.open("ab"):
                pass
        else:
            where = f"into {folder}"
            with tempfile.TemporaryFile(dir=folder):
                pass
    except OSError as exc:
        raise ConfigError(
            f"{flag} {path}: cannot write {where} ({exc.strerror or exc}); pick a writable directory"
        ) from None


def _nearest_existing(folder: Path) -> Path:
    """`folder` or its closest ancestor that exists (the writer creates the ones in between)."""
    folder = folder.absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def plot_path(args: argparse.Namespace, default: Path) -> Path | None:
    """--plot, else `default` unless --json (whose output is for scripts); --no-plot: none.
    Checked now, so that a bad name does not cost the run."""
    if args.no_plot:
        return None
    path: Path | None = args.plot if args.plot else (None if args.json else default)
    return None if path is None else check_image_path(path, "--plot")
