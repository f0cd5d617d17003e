from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dartfl.cli.dashboard_cmd import streamlit_command
from dartfl.cli.main import build_parser, main


def _args(*argv: str) -> object:
    return build_parser().parse_args(["dashboard", *argv])


def test_dashboard_runs_streamlit_headless_on_loopback_with_settings_in_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DARTFL_BROKER", raising=False)
    args = _args("--store", str(tmp_path / "s.sqlite"), "--port", "8765", "--broker", "mqtt://127.0.0.1:1884")
    argv, env = streamlit_command(args)  # type: ignore[arg-type]
    assert argv[1:4] == ["-m", "streamlit", "run"] and argv[4].endswith("dashboard/app.py")
    assert Path(argv[4]).is_file()
    for flag in (
        "--server.headless=true",
        "--server.address=127.0.0.1",
        "--server.port=8765",
        "--browser.gatherUsageStats=false",
    ):
        assert flag in argv
    assert env["DARTFL_STORE"] == str((tmp_path / "s.sqlite").resolve())
    assert env["DARTFL_BROKER"] == "mqtt://127.0.0.1:1884"
    exposed, no_broker = streamlit_command(_args("--address", "0.0.0.0"))  # type: ignore[arg-type]
    assert "--server.address=0.0.0.0" in exposed and "--server.port=8501" in exposed
    assert "DARTFL_BROKER" not in no_broker


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--port", "70000"], "--port must be 1-65535"),
        (["--broker", "http://x"], "mqtt://"),
        (["--stale-after-s", "100", "--gone-after-s", "50"], "stale_after_s < gone_after_s"),
        (["--slo-target", "1.5"], "SLO target"),
    ],
)
def test_bad_dashboard_flags_exit_2_naming_the_problem(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["dashboard", *argv]) == 2
    assert message in capsys.readouterr().err


def test_bad_record_flags_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["record", "--broker", "mqtt://127.0.0.1:1883", "--flush-s", "0"]) == 2
    assert "--flush-s" in capsys.readouterr().err
    assert main(["record", "--broker", "ftp://x"]) == 2


def test_help_lists_dashboard_and_record_without_importing_streamlit() -> None:
    code = (
        "import sys, contextlib, io\nfrom dartfl.cli.main import main\n"
        "out = io.StringIO()\nwith contextlib.redirect_stdout(out):\n"
        "    try: main(['--help'])\n    except SystemExit: pass\n"
        "print('streamlit' in sys.modules, 'dashboard' in out.getvalue(), 'record' in out.getvalue())"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.split() == ["False", "True", "True"], proc.stderr
