"""Starting and stopping Flower's processes on loopback, and `flwr run`, for the CLI and the tests.

Every process is started in its own session and stopped by its process group, so nothing is
left behind even when a run fails. We start our own simulation SuperLink on a free loopback
port instead of letting `flwr run` start its detached one on 39091/39093 (which nothing would
stop). Ray, which the simulation runs on, must run in a loopback-only network namespace:
run the calling command under `scripts/loopback-run`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from dartfl.errors import DartflError
from orchestration.flower_app import toml_value, write_app

__all__ = [
    "LocalSuperLink",
    "ManagedProcess",
    "flower_env",
    "flwr_run",
    "flwr_run_status",
    "free_port",
    "start_process",
    "supernode_id",
    "wait_for_port",
    "write_connection",
]

_BIN = Path(sys.executable).parent


def flower_bin(name: str) -> str:
    """The path of Flower's command `name` (flower-superlink, flwr, ...): its package installs
    them beside the interpreter. Refused with the fix where Flower is not installed."""
    path = _BIN / name
    if not os.access(path, os.X_OK):
        raise DartflError(
            f"{name} not found beside {sys.executable}: Flower is not installed in this "
            "environment; pip install 'dartfl[fl]'"
        )
    return str(path)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, timeout_s: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise DartflError(f"process {proc.args!r} exited with code {proc.returncode} before listening")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.2)
    raise DartflError(f"nothing listens on 127.0.0.1:{port} after {timeout_s:.0f} s")


def flower_env(flwr_home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment every Flower process needs here (no telemetry, no update check, no uv sync)."""
    env = dict(os.environ)
    env.update(
        {
            "FLWR_HOME": str(flwr_home),
            "FLWR_TELEMETRY_ENABLED": "0",
            "FLWR_DISABLE_UPDATE_CHECK": "1",
            "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
            "RAY_USAGE_STATS_ENABLED": "0",
            "PATH": f"{_BIN}{os.pathsep}{env.get('PATH', '')}",
            "OMP_NUM_THREADS": "1",
        }
    )
    env.update(extra or {})
    return env


class ManagedProcess:
    """A child process in its own session; `stop()` ends its whole process group."""

    def __init__(self, args: Sequence[str], env: Mapping[str, str], log_path: Path) -> None:
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            list(args), env=dict(env), stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def kill(self) -> None:
        """SIGKILL the group at once (a crash, for fault tests)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self, grace_s: float = 5.0) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(grace_s)
        # Children (e.g. flwr-serverapp, Ray workers) may outlive the leader: kill the group.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(grace_s)
        self._log.close()

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def start_process(args: Sequence[str], env: Mapping[str, str], log_path: Path) -> ManagedProcess:
    return ManagedProcess(args, env, log_path)


_SUPERNODE_ID = re.compile(rb"SuperNode ID: (\d+)")


def supernode_id(log_path: Path) -> int | None:
    """The node id a `flower-supernode` got from the SuperLink, read from its log ("SuperNode
    ID: N"); None until it has registered. Flower names nodes by these random ids only."""
    try:
        found = _SUPERNODE_ID.findall(log_path.read_bytes())
    except OSError:
        return None
    return int(found[-1]) if found else None


def write_connection(
    flwr_home: Path, name: str, address: str, *, insecure: bool = True, root_certificates: Path | None = None
) -> None:
    """Point `flwr run . <name>` at a SuperLink ($FLWR_HOME/config.toml): plain HTTP when
    `insecure`, else TLS checked against `root_certificates` (None: the system's CAs)."""
    flwr_home.mkdir(parents=True, exist_ok=True)
    lines = ["[superlink]", f"default = {toml_value(name)}", "", f"[superlink.{name}]"]
    lines += [f"address = {toml_value(address)}", f"insecure = {toml_value(insecure)}"]
    if root_certificates is not None:
        lines.append(f"root-certificates = {toml_value(str(root_certificates))}")
    (flwr_home / "config.toml").write_text("\n".join([*lines, ""]))


class LocalSuperLink:
    """A SuperLink on free loopback ports, its state in `workdir/superlink.db`: killed and
    started again (a server crash, in the fault tests), it comes back on the same address with
    its nodes and runs, and the SuperNodes reconnect on their own."""

    def __init__(self, workdir: Path, *, simulation: bool, name: str = "dartfl") -> None:
        self.name = name
        self.env = flower_env(workdir / "flwr-home")
        self.port, control, fleet = free_port(), free_port(), free_port()
        self.env["DARTFL_SUPERLINK_FLEET"] = f"127.0.0.1:{fleet}"
        self.env["DARTFL_SUPERLINK_PORT"] = str(self.port)
        self._args = [
            flower_bin("flower-superlink"),
            "--insecure",
            "--disable-runtime-dependency-installation",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--control-api-address",
            f"127.0.0.1:{control}",
            "--fleet-api-address",
            f"127.0.0.1:{fleet}",
            "--database",
            str(workdir / "superlink.db"),
        ]
        if simulation:
            self._args += ["--simulation", "--isolation", "subprocess"]
        self.log_path = workdir / "superlink.log"
        self._process: ManagedProcess | None = None

    def start(self) -> None:
        """Start it (again, after `kill`) and wait until it listens; stopped if it does not."""
        if self._process is not None and self._process.proc.poll() is None:
            raise DartflError(f"the SuperLink on 127.0.0.1:{self.port} is already running")
        self._process = start_process(self._args, self.env, self.log_path)
        try:
            wait_for_port(self.port, 30, self._process.proc)
        except BaseException:
            self._process.stop()
            raise
        write_connection(Path(self.env["FLWR_HOME"]), self.name, f"127.0.0.1:{self.port}")

    def kill(self) -> None:
        """SIGKILL the SuperLink and its process group (SuperExec, ServerApps)."""
        if self._process is not None:
            self._process.kill()
            self._process.stop()  # closes its log

    def stop(self) -> None:
        if self._process is not None:
            self._process.stop()

    def __enter__(self) -> LocalSuperLink:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def flwr_run(
    connection: str,
    env: Mapping[str, str],
    run_config: Mapping[str, int | float | str],
    *,
    federation_config: str | None = None,
    timeout_s: float = 900.0,
    log_path: Path | None = None,
    stream: bool = True,
    on_line: Callable[[str], None] | None = None,
) -> str:
    """`flwr run <app> <connection>` of the packaged app (orchestration.flower_app, written
    into a scratch directory for the call); returns its output. With `stream` (`--stream`) it
    lasts until the run ends, printing the ServerApp's log; `on_line` sees each line."""
    overrides = " ".join(f"{k}={toml_value(v)}" for k, v in run_config.items())
    with scratch_dir("dartfl-app-") as scratch:
        app = write_app(scratch / "dartfl")
        args = [flower_bin("flwr"), "run", str(app), connection, "--run-config", overrides]
        if federation_config:
            args += ["--federation-config", federation_config]
        if stream:
            args.append("--stream")
        returncode, output = _run_capturing(args, env, timeout_s, on_line)
    if log_path is not None:
        log_path.write_text(output)
    if returncode is None:
        raise DartflError(f"flwr run did not finish within {timeout_s:.0f} s")
    if returncode != 0:
        raise DartflError(f"flwr run failed (exit {returncode}):\n{output[-3000:]}")
    return output


def flwr_run_status(connection: str, env: Mapping[str, str], run_id: int, timeout_s: float = 60.0) -> str:
    """The status of run `run_id` on the SuperLink of `connection`, as Flower words it
    (`finished:completed`, `finished:failed`, `running`...), from `flwr ls --run-id`."""
    args = [flower_bin("flwr"), "ls", connection, "--run-id", str(run_id), "--format", "json"]
    returncode, output = _run_capturing(args, env, timeout_s, None)
    try:
        answer = json.loads(output[output.index("{") :])
        return str(answer["runs"][0]["status"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise DartflError(
            f"cannot read run {run_id}'s status (exit {returncode}):\n{output[-2000:]}"
        ) from None


def _run_capturing(
    args: Sequence[str], env: Mapping[str, str], timeout_s: float, on_line: Callable[[str], None] | None
) -> tuple[int | None, str]:
    """Run `args` in its own session, stdout and stderr merged; (exit code, or None when it ran
    past `timeout_s` and was killed; everything it printed)."""
    proc = subprocess.Popen(
        list(args), env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        _kill_group(proc)

    timer = threading.Timer(timeout_s, expire)
    timer.start()
    lines = []
    try:
        for line in proc.stdout or ():
            lines.append(line)
            if on_line is not None:
                on_line(line.rstrip("\n"))
        returncode = proc.wait()
    finally:
        timer.cancel()
        if proc.poll() is None:  # interrupted (Ctrl-C): leave no child behind
            _kill_group(proc)
    return (None if expired.is_set() else returncode), "".join(lines)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@contextlib.contextmanager
def scratch_dir(prefix: str = "dartfl-fl-") -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
