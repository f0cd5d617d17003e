"""Throwaway TLS material for tests: a CA, a broker certificate for 127.0.0.1, a client
certificate, an unrelated CA, and a Mosquitto password file, all made with the `openssl` and
`mosquitto_passwd` command-line tools in a temp dir.

The broker certificate names only the IP address 127.0.0.1 (no DNS name), so connecting to
`localhost` is a real host-name mismatch. EC P-256 keys: generating them takes milliseconds.
Import explicitly (`from tests.messaging import tls_fixtures as tls`); its pytest fixtures
`tls_files`, `tls_broker` and `strict_broker` are registered for the suite by tests/conftest.py.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from messaging.brokers import BrokerHandle, MosquittoTls, start_mosquitto
from messaging.security import MqttSecurity

__all__ = [
    "CLIENT_PASSWORD",
    "CLIENT_USER",
    "REQUESTER_USER",
    "TlsFiles",
    "client_login",
    "make_tls_files",
    "strict_broker",
    "tls_broker",
    "tls_files",
]

CLIENT_USER = "edge-1"
CLIENT_PASSWORD = "correct horse battery staple"
# A second account: a logged-in client's id is its account's name (messaging.link), so two
# clients at once need two accounts.
REQUESTER_USER = "requester-1"
_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]


@dataclass(frozen=True)
class TlsFiles:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path  # signed nothing here: trusting it must fail the handshake
    password_file: Path


def _openssl(*args: str | Path, cwd: Path) -> None:
    subprocess.run(["openssl", *map(str, args)], cwd=cwd, check=True, capture_output=True, timeout=30)


def _self_signed_ca(directory: Path, name: str) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    _openssl(
        "req",
        "-x509",
        *_KEY,
        "-days",
        "2",
        "-subj",
        f"/CN={name}",
        "-keyout",
        key,
        "-out",
        cert,
        cwd=directory,
    )
    return cert, key


def _signed(directory: Path, name: str, ca: tuple[Path, Path], extensions: str) -> tuple[Path, Path]:
    cert, key, csr, ext = (directory / f"{name}{s}" for s in (".crt", ".key", ".csr", ".ext"))
    _openssl("req", *_KEY, "-subj", f"/CN={name}", "-keyout", key, "-out", csr, cwd=directory)
    ext.write_text(extensions + "\n")
    _openssl(
        "x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1], "-CAcreateserial",
        "-days", "2", "-extfile", ext, "-out", cert, cwd=directory,
    )  # fmt: skip
    return cert, key


def make_tls_files(directory: Path) -> TlsFiles:
    """Write every file into `directory`; raises (never skips) if the tools are missing."""
    for tool in ("openssl", "mosquitto_passwd"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"{tool} is not installed (apt-get install openssl mosquitto)")
    directory.mkdir(parents=True, exist_ok=True)
    ca = _self_signed_ca(directory, "test-ca")
    other_ca, _ = _self_signed_ca(directory, "other-ca")
    server = _signed(directory, "broker", ca, "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth")
    client = _signed(directory, CLIENT_USER, ca, "extendedKeyUsage=clientAuth")
    passwd = directory / "passwd"
    passwd.touch(mode=0o600)
    for user in (CLIENT_USER, REQUESTER_USER):  # a test password on a command line is fine
        subprocess.run(
            ["mosquitto_passwd", "-b", str(passwd), user, CLIENT_PASSWORD],
            check=True,
            capture_output=True,
            timeout=30,
        )
    return TlsFiles(ca[0], server[0], server[1], client[0], client[1], other_ca, passwd)


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def tls_broker(tls_files: TlsFiles) -> Iterator[BrokerHandle]:
    """A private Mosquitto with a TLS listener (`handle.tls_url`) that checks nothing of the client."""
    tls = MosquittoTls(tls_files.ca, tls_files.server_cert, tls_files.server_key)
    with start_mosquitto(tls=tls) as broker:
        yield broker


@pytest.fixture(scope="module")
def strict_broker(tls_files: TlsFiles) -> Iterator[BrokerHandle]:
    """A private Mosquitto whose TLS listener wants a client certificate from the CA and a login."""
    f = tls_files
    tls = MosquittoTls(
        f.ca, f.server_cert, f.server_key, require_certificate=True, password_file=f.password_file
    )
    with start_mosquitto(tls=tls) as broker:
        yield broker


def client_login(files: TlsFiles, password: str = CLIENT_PASSWORD, user: str = CLIENT_USER) -> MqttSecurity:
    """Everything the strict broker asks for: its CA, the client certificate, an account."""
    return MqttSecurity(files.ca, files.client_cert, files.client_key, user, password)
