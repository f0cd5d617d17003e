"""Output files are checked before the work: a name that cannot be written fails at once
with exit 2 and one line, instead of a traceback after a simulation or a measurement."""

from __future__ import annotations

from pathlib import Path

import pytest

from dartfl.cli.main import main
from dartfl.cli.output_paths import check_image_path, check_output_path
from dartfl.errors import ConfigError


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "w.csv"
    path.write_text("time_s,task\n0.5,a\n1.5,b\n3,a\n")
    return path


def _argv(command: str, trace: Path, out: Path) -> list[str]:
    """The command writing to `out`, recording into the run store where it would."""
    sim = ["sim", "--workload", "poisson", "--duration-s", "5", "--profile", "pi4", "--policy", "dart"]
    argvs = {
        "sim": [*sim, "--plot", str(out)],
        "sim --json": [*sim, "--json", "--plot", str(out)],
        "dc sim": ["dc", "sim", "--gpus", "8", "--steps", "2", "--policy", "sync", "--plot", str(out)],
        "workload plot": ["workload", "plot", str(trace), "-o", str(out)],
        "workload generate": ["workload", "generate", "poisson", "--duration-s", "5", "-o", str(out)],
        "edge profile": ["edge", "profile", "--quick", "--max-train", "50", "-o", str(out)],
    }
    return argvs[command]


def _bad_path(kind: str, tmp_path: Path) -> Path:
    if kind == "directory":
        (tmp_path / "out.png").mkdir()
        return tmp_path / "out.png"
    (tmp_path / "file").write_text("x")
    return tmp_path / "file" / "out.png"  # its directory would have to replace a file


IMAGE_COMMANDS = ["sim", "sim --json", "dc sim", "workload plot"]


@pytest.mark.parametrize("command", [*IMAGE_COMMANDS, "workload generate", "edge profile"])
@pytest.mark.parametrize(
    ("kind", "problem"), [("directory", "is a directory"), ("under a file", "is a file")]
)
def test_unwritable_output_exits_2_before_the_work(
    tmp_path: Path,
    trace: Path,
    capsys: pytest.CaptureFixture[str],
    _private_run_store: Path,
    command: str,
    kind: str,
    problem: str,
) -> None:
    assert main(_argv(command, trace, _bad_path(kind, tmp_path))) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("dartfl: error: ")
    assert problem in err
    assert not _private_run_store.exists()  # nothing ran, so nothing was recorded


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
@pytest.mark.parametrize("command", [*IMAGE_COMMANDS, "workload generate", "edge profile"])
def test_a_place_that_takes_no_file_exits_2_before_the_work_even_for_root(
    tmp_path: Path, trace: Path, capsys: pytest.CaptureFixture[str], _private_run_store: Path, command: str
) -> None:
    # Root passes the permission bits everywhere, so only making a file tells; /proc takes
    # none. The commands found out after the work, with a FileNotFoundError traceback.
    out = Path("/proc/out.png" if command in IMAGE_COMMANDS else "/proc/out.csv")
    assert main(_argv(command, trace, out)) == 2
    err = capsys.readouterr().err.strip()
    flag = "--plot" if command in IMAGE_COMMANDS[:3] else "-o"
    reason = "(No such file or directory); pick a writable directory"
    assert err == f"dartfl: error: {flag} {out}: cannot write into /proc {reason}"
    assert not _private_run_store.exists()


@pytest.mark.parametrize("command", IMAGE_COMMANDS)
def test_plot_name_without_an_image_suffix_exits_2_before_the_work(
    tmp_path: Path, trace: Path, capsys: pytest.CaptureFixture[str], _private_run_store: Path, command: str
) -> None:
    assert main(_argv(command, trace, tmp_path / "plot.txt")) == 2
    err = capsys.readouterr().err.strip()
    assert "must end in an image format (png, pdf, svg" in err and "e.g. " in err
    assert err.endswith("plot.png")
    assert not _private_run_store.exists()


def test_an_image_in_a_new_directory_is_fine(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "plot.SVG"
    assert check_image_path(path, "--plot") == path
    assert not (tmp_path / "a").exists()  # checking creates nothing


def test_an_existing_file_may_be_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "profile.toml"
    path.write_text("old")
    assert check_output_path(path, "-o", "edge-profile.toml") == path


def test_a_directory_gets_an_example_name_inside_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"e\.g\. .*/edge-profile\.toml$"):
        check_output_path(tmp_path, "-o", "edge-profile.toml")
