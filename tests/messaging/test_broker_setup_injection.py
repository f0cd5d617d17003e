"""`dartfl broker setup` refuses what would change the Mosquitto config behind its back (a
newline in a path starts a line of the caller's choosing), in flags and in a saved
setup.toml alike, and a folder, file or roster change that cannot work, each in one line
with exit code 2 and nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dartfl.cli.main import main
from dartfl.errors import ConfigError
from messaging.broker_setup import read_setup, write_broker_setup

INJECTED = "\nallow_anonymous true"


@pytest.fixture
def pem(tmp_path: Path) -> Path:
    """A file to stand for each certificate and key (the set-up only checks that it can be read)."""
    path = tmp_path / "ca.crt"
    path.write_text("-----BEGIN CERTIFICATE-----\n")
    return path


def _setup(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["broker", "setup", *args])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--cafile", "--certfile", "--keyfile"])
@pytest.mark.parametrize("tail", [INJECTED, "\rallow_anonymous true", "\x00", "\t"])
def test_a_control_character_in_a_certificate_flag_is_refused_naming_the_flag(
    tmp_path: Path, pem: Path, capsys: pytest.CaptureFixture[str], flag: str, tail: str
) -> None:
    folder = tmp_path / "broker"
    code, err = _setup(capsys, "--dir", str(folder), "--device", "pi-01", flag, f"{pem}{tail}")
    (line,) = err.strip().splitlines()
    assert code == 2 and line.startswith("dartfl: error: ") and flag in line and "control character" in line
    assert not folder.exists()


def test_a_control_character_in_the_tls_address_or_the_folder_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = _setup(
        capsys, "--dir", str(tmp_path / "b"), "--device", "p", "--tls-address", "127.0.0.1\x00"
    )
    assert code == 2 and "--tls-address" in err
    folder = tmp_path / f"b{INJECTED}"
    code, err = _setup(capsys, "--dir", str(folder), "--device", "pi-01")
    (line,) = err.strip().splitlines()
    assert code == 2 and "--dir" in line and not folder.exists()


def test_an_injected_value_saved_in_setup_toml_is_refused_on_the_next_run(
    tmp_path: Path, pem: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "broker"
    write_broker_setup(folder, add={"device": ["pi-01"]})
    saved = (folder / "setup.toml").read_text()
    clean_conf = (folder / "dartfl.conf").read_text()
    (folder / "setup.toml").write_text(
        saved.replace(
            'ca-file = "/etc/mosquitto/certs/ca.crt"', f"ca-file = {json.dumps(str(pem) + INJECTED)}"
        )
    )
    with pytest.raises(ConfigError, match="--cafile holds a control character"):
        read_setup(folder)
    code, err = _setup(capsys, "--dir", str(folder), "--device", "pi-02")
    (line,) = err.strip().splitlines()
    assert code == 2 and "setup.toml" in line and "--cafile" in line
    assert (folder / "dartfl.conf").read_text() == clean_conf


@pytest.mark.parametrize("flag", ["--cafile", "--certfile", "--keyfile"])
def test_a_certificate_flag_must_name_a_readable_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str
) -> None:
    folder = tmp_path / "broker"
    code, err = _setup(capsys, "--dir", str(folder), "--device", "pi-01", flag, str(tmp_path / "nope.pem"))
    assert code == 2 and f"{flag} {tmp_path / 'nope.pem'}: no such file" in err
    code, err = _setup(capsys, "--dir", str(folder), "--device", "pi-01", flag, str(tmp_path))
    assert code == 2 and "not a file" in err and not folder.exists()


def test_a_readable_certificate_flag_is_written_into_the_config(tmp_path: Path, pem: Path) -> None:
    folder = tmp_path / "broker"
    write_broker_setup(folder, settings={"ca_file": pem}, add={"device": ["pi-01"]})
    assert f"cafile {pem}\n" in (folder / "dartfl.conf").read_text()
    assert "allow_anonymous true" not in (folder / "dartfl.conf").read_text()


@pytest.mark.parametrize(
    ("folder", "message"),
    [("/proc/1/nope", "cannot write the broker set-up"), ("/etc/passwd", "is a file, not a folder")],
)
def test_a_folder_that_cannot_hold_the_setup_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], folder: str, message: str
) -> None:
    code, err = _setup(capsys, "--dir", folder, "--device", "pi-01")
    (line,) = err.strip().splitlines()
    assert code == 2 and line.startswith(f"dartfl: error: --dir {folder}") and message in line


def test_adding_and_removing_one_account_in_one_run_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "broker"
    code, err = _setup(capsys, "--dir", str(folder), "--device", "pi-02", "--remove", "pi-02")
    (line,) = err.strip().splitlines()
    assert code == 2 and "pi-02: both added and removed" in line and not folder.exists()
