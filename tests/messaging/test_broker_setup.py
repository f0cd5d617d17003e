"""`dartfl broker setup` and what it writes (no broker: tests/messaging/test_production_broker.py
starts one on these files): the shipped config leaves no way around the accounts, the ACL gives
each role its lines and nothing else, and a second run changes only what it is told to."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from dartfl.cli.main import main
from dartfl.errors import ConfigError
from messaging.accounts import Roster, read_template, render_acl
from messaging.broker_setup import read_setup, render_config, write_broker_setup
from messaging.passwords import read_password_file
from orchestration.flower_app import REPOSITORY_PACKAGES

ROOT = Path(__file__).resolve().parents[2]
FLEET = {"device": ["pi-1", "pi-2"], "requester": ["app"], "recorder": ["rec"], "dashboard": ["dash"]}


def _blocks(acl: str) -> dict[str, list[str]]:
    """account -> its rule lines, from a rendered ACL; lines before the first `user` under ''."""
    blocks: dict[str, list[str]] = {"": []}
    current = ""
    for line in acl.splitlines():
        if line.startswith("user "):
            current = line.removeprefix("user ")
            blocks[current] = []
        elif line and not line.startswith("#"):
            blocks[current].append(line)
    return blocks


def test_the_shipped_config_has_one_set_of_logins_for_every_listener_and_binds_client_ids(
    tmp_path: Path,
) -> None:
    conf = render_config(tmp_path, read_setup(tmp_path)[0])
    lines = [line for line in conf.splitlines() if line and not line.startswith("#")]
    assert "per_listener_settings false" in lines and "allow_anonymous false" in lines
    assert not any(line.startswith("allow_anonymous true") for line in lines)
    assert f"password_file {tmp_path.resolve() / 'passwd'}" in lines
    assert f"acl_file {tmp_path.resolve() / 'acl'}" in lines
    # use_username_as_clientid is a listener setting: every listener block must have it.
    listeners = [i for i, line in enumerate(lines) if line.startswith("listener ")]
    assert [lines[i] for i in listeners] == ["listener 1883 127.0.0.1", "listener 8883"]
    for start, end in zip(listeners, [*listeners[1:], len(lines)], strict=True):
        assert "use_username_as_clientid true" in lines[start:end], lines[start]


def test_each_role_gets_exactly_its_lines_and_nobody_else_any() -> None:
    roster = Roster(devices=("pi-1", "pi-2"), requesters=("app",), recorders=("rec",), dashboards=("dash",))
    blocks = _blocks(render_acl(roster))
    assert blocks.pop("") == []  # no anonymous rights
    assert not any(line.startswith("pattern") for lines in blocks.values() for line in lines)
    assert blocks == {
        "pi-1": [
            "topic read dartfl/v1/pi-1/req/+",
            "topic write dartfl/v1/pi-1/telemetry",
            "topic write dartfl/v1/pi-1/status",
            "topic write dartfl/v1/_reply/#",
        ],
        "pi-2": [
            "topic read dartfl/v1/pi-2/req/+",
            "topic write dartfl/v1/pi-2/telemetry",
            "topic write dartfl/v1/pi-2/status",
            "topic write dartfl/v1/_reply/#",
        ],
        "app": [
            "topic write dartfl/v1/pi-1/req/+",
            "topic write dartfl/v1/pi-2/req/+",
            "topic read dartfl/v1/pi-1/status",
            "topic read dartfl/v1/pi-2/status",
            "topic read dartfl/v1/pi-1/telemetry",
            "topic read dartfl/v1/pi-2/telemetry",
            "topic read dartfl/v1/_reply/app/#",
        ],
        "rec": ["topic read dartfl/v1/+/telemetry"],
        "dash": ["topic read dartfl/v1/+/telemetry", "topic read dartfl/v1/+/status"],
    }


def test_the_acl_template_has_a_block_for_every_role_and_no_other() -> None:
    template = read_template("acl.template")
    assert re.findall(r"^# role: (\S+)$", template, re.MULTILINE) == [
        "device",
        "requester",
        "recorder",
        "dashboard",
    ]
    with pytest.raises(ConfigError, match="expected one for each"):
        render_acl(Roster(), template.replace("# role: recorder", "# role: auditor"))


@pytest.mark.parametrize(
    ("roster", "message"),
    [
        ({"devices": ("pi-1",), "requesters": ("pi-1",)}, "cannot be both a device and a requester"),
        ({"requesters": ("status",)}, "reserved"),
        ({"devices": ("a/b",)}, "A-Za-z0-9"),
        ({"recorders": ("bad name",)}, "A-Za-z0-9"),
    ],
)
def test_the_roster_refuses_names_that_would_break_the_acl(
    roster: dict[str, tuple[str, ...]], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        Roster(**roster)


def test_a_second_run_adds_removes_and_renews_only_what_it_is_told(tmp_path: Path) -> None:
    folder = tmp_path / "broker"
    write_broker_setup(folder, settings={"tls_port": 9883}, add=FLEET)
    hashes = read_password_file(folder / "passwd")
    assert sorted(hashes) == sorted(name for names in FLEET.values() for name in names)
    first_password = (folder / "credentials" / "pi-2.env").read_text()
    result = write_broker_setup(folder, add={"device": ["pi-3"]}, remove=["pi-1"], renew=["dash"])
    assert (result.passwords.created, result.passwords.removed, result.passwords.renewed) == (
        ("pi-3",),
        ("pi-1",),
        ("dash",),
    )
    after = read_password_file(folder / "passwd")
    assert "pi-1" not in after and not (folder / "credentials" / "pi-1.env").exists()
    assert after["pi-2"] == hashes["pi-2"] and after["app"] == hashes["app"]  # kept as they were
    assert after["dash"] != hashes["dash"]
    assert (folder / "credentials" / "pi-2.env").read_text() == first_password
    settings, roster = read_setup(folder)
    assert settings.tls_port == 9883  # kept from the first run
    assert roster.devices == ("pi-2", "pi-3")
    assert "user pi-1" not in (folder / "acl").read_text()
    assert "listener 9883" in (folder / "dartfl.conf").read_text()


def test_secrets_are_private_and_passwords_never_on_a_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[list[str]] = []
    real_run = subprocess.run

    def spy(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        calls.append(list(args))
        return real_run(args, **kwargs)  # type: ignore[call-overload, no-any-return]

    monkeypatch.setattr(subprocess, "run", spy)
    folder = tmp_path / "broker"
    write_broker_setup(folder, add=FLEET)
    passwords = [
        (folder / "credentials" / f"{name}.env").read_text().split("=", 1)[1].strip()
        for name in ("pi-1", "app")
    ]
    assert calls and not any(password in " ".join(call) for call in calls for password in passwords)
    for path in (folder / "credentials" / "app.env", folder / "setup.toml"):
        assert path.stat().st_mode & 0o077 == 0, path
    assert (folder / "credentials").stat().st_mode & 0o077 == 0
    assert (folder / "passwd").stat().st_mode & 0o007 == 0  # at most the broker's group reads it
    assert not list(folder.glob(".passwd-*"))  # the plain-text file is gone


def test_dartfl_broker_setup_writes_the_files_and_exits_2_on_a_bad_roster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "broker"
    assert main(["broker", "setup", "--dir", str(folder), "--device", "pi-1", "--requester", "app"]) == 0
    assert {p.name for p in folder.iterdir()} == {"dartfl.conf", "acl", "passwd", "setup.toml", "credentials"}
    assert "new      pi-1, app" in capsys.readouterr().out
    assert main(["broker", "setup", "--dir", str(folder), "--recorder", "pi-1"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "cannot be both a device and a recorder" in line
    assert main(["broker", "setup", "--dir", str(tmp_path / "empty")]) == 2
    assert "roster would be empty" in capsys.readouterr().err


@pytest.mark.slow
def test_a_wheel_ships_the_config_and_acl_templates(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    (source / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "dartfl_build.py", source / "scripts")  # the build backend
    for package in REPOSITORY_PACKAGES:
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(source),
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = tmp_path.glob("dartfl-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    # The wheel installs the folder as dartfl_messaging (scripts/dartfl_build.py).
    templates = {"dartfl_messaging/mosquitto/dartfl.conf.template", "dartfl_messaging/mosquitto/acl.template"}
    assert templates <= set(names)
