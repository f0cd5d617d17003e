"""Submitting DART-FL's Flower app (orchestration.flower_app) to a running SuperLink, local or
remote, and following it to the end: what `dartfl fl run` does.

The SuperLink's Control API is its HTTP port (`flower-superlink --port`, 8000 by default). The
connection is written into a private, temporary $FLWR_HOME for the call: the user's Flower
configuration is neither needed nor changed (so Flower account login, `flwr login`, is not
supported here). `flwr run` and `flwr ls` run as subprocesses (orchestration.flower_processes.flwr_run).
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from dartfl.errors import ConfigError, DartflError

__all__ = ["DEFAULT_SUPERLINK_PORT", "SubmittedRun", "SuperLinkTarget", "submit_run"]

log = logging.getLogger(__name__)

DEFAULT_SUPERLINK_PORT = 8000
_CONNECTION = "dartfl-target"
_STARTED = re.compile(r"Successfully started run (\d+)")
# What Flower's CLI says when an HTTP request to the Control API fails (refused, TLS, timeout).
_UNAVAILABLE = "Connection to the SuperLink is unavailable"
COMPLETED = "finished:completed"


@dataclass(frozen=True)
class SuperLinkTarget:
    """Where the SuperLink's Control API listens and how to reach it: TLS checked against
    `root_certificates` (None: the system's CAs), or plain HTTP with `insecure`."""

    host: str
    port: int = DEFAULT_SUPERLINK_PORT
    root_certificates: Path | None = None
    insecure: bool = False

    def __post_init__(self) -> None:
        if not self.host:
            raise ConfigError("--superlink needs a host, e.g. 127.0.0.1:8000")
        if not 1 <= self.port <= 65535:
            raise ConfigError(f"--superlink port must be 1-65535, got {self.port}")
        if self.insecure and self.root_certificates is not None:
            raise ConfigError("--insecure and --root-certificates contradict each other: pick one")
        cert = self.root_certificates
        if cert is not None and not cert.is_file():
            raise ConfigError(
                f"--root-certificates {cert}: no such file (the CA that signed the SuperLink's)"
            )

    @classmethod
    def parse(
        cls, address: str, *, root_certificates: Path | None = None, insecure: bool = False
    ) -> SuperLinkTarget:
        """`HOST:PORT`, `HOST` (port 8000) or `[IPv6]:PORT`."""
        expected = f"--superlink {address!r}: expected HOST:PORT, e.g. 127.0.0.1:8000"
        parts = urlsplit(f"//{address.strip()}")
        try:
            port = parts.port
        except ValueError:
            raise ConfigError(expected) from None
        if not parts.hostname or parts.path or parts.query or parts.username:
            raise ConfigError(expected)
        return cls(
            parts.hostname, DEFAULT_SUPERLINK_PORT if port is None else port, root_certificates, insecure
        )

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def is_loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


@dataclass(frozen=True)
class SubmittedRun:
    run_id: int
    status: str | None  # Flower's words, e.g. "finished:completed"; None when not waited for

    @property
    def completed(self) -> bool:
        return self.status == COMPLETED


def check_reachable(target: SuperLinkTarget, timeout_s: float = 5.0) -> None:
    """Raise DartflError, naming the address and how to start a SuperLink, if nothing listens."""
    try:
        with socket.create_connection((target.host, target.port), timeout=timeout_s):
            return
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
    raise DartflError(
        f"no SuperLink answers at {target.address} ({reason}); start one there (`flower-superlink "
        "--insecure --disable-runtime-dependency-installation` on a lab machine, docs/deployment.md "
        "section 4), or give its address: --superlink HOST:PORT (its --port, 8000 by default)"
    )


def submit_run(
    target: SuperLinkTarget,
    run_config: Mapping[str, int | float | str],
    *,
    wait: bool = True,
    timeout_s: float = 86400.0,
    on_log: Callable[[str], None] | None = None,
    on_run_id: Callable[[int], None] | None = None,
) -> SubmittedRun:
    """Start a run of the packaged app with `run_config` overrides. With `wait`, follow
    its log (each line to `on_log`) until it ends and return its final status."""
    from orchestration.flower_processes import (
        flower_env,
        flwr_run,
        flwr_run_status,
        scratch_dir,
        write_connection,
    )

    check_reachable(target)
    run_ids: list[int] = []

    def watch(line: str) -> None:
        if not run_ids and (found := _STARTED.search(line)):
            run_ids.append(int(found.group(1)))
            if on_run_id is not None:
                on_run_id(run_ids[0])
        elif on_log is not None:
            on_log(line)

    with scratch_dir("dartfl-flwr-home-") as home:
        write_connection(
            home,
            _CONNECTION,
            target.address,
            insecure=target.insecure,
            root_certificates=None
            if target.root_certificates is None
            else target.root_certificates.resolve(),
        )
        env = flower_env(home)
        try:
            output = flwr_run(_CONNECTION, env, run_config, timeout_s=timeout_s, stream=wait, on_line=watch)
        except DartflError as exc:
            raise _explain(exc, target) from None
        if not run_ids:
            raise DartflError(f"the SuperLink at {target.address} did not start the run:\n{output[-2000:]}")
        if not wait:
            return SubmittedRun(run_ids[0], None)
        status = flwr_run_status(_CONNECTION, env, run_ids[0])
    return SubmittedRun(run_ids[0], status)


def _explain(exc: DartflError, target: SuperLinkTarget) -> DartflError:
    """Flower's failure as one line: what most likely went wrong with this target."""
    text = str(exc)
    if _UNAVAILABLE not in text:
        return exc
    if target.insecure:
        hint = "it may serve TLS: drop --insecure, give --root-certificates CA.pem"
    else:
        hint = (
            "TLS failed: give --root-certificates with the CA that signed its certificate, or "
            "--insecure if it runs with --insecure"
        )
    with contextlib.suppress(ValueError):
        text = text[text.index(_UNAVAILABLE) :].splitlines()[0]
    return DartflError(
        f"the SuperLink at {target.address} accepts connections but not Flower's Control API ({hint}): {text}"
    )
