"""The round channel: how a Flower ClientApp hands one federated round to the device agent.

In deployment the ClientApp is a fresh process per message, while the device agent (the
inference server and co-scheduler) is long-lived. The agent runs this tiny HTTP server,
bound to loopback only, and the SuperNode is told its address with
`--node-config 'agent-address="127.0.0.1:PORT"'`.

    POST /round   body: pack(order, weights)  -> 200 body: pack(result, trained weights)
    GET  /health                              -> 200 JSON {"device": ..., "tasks": [...]}

The order and the result are `RoundOrder` and `RoundResult` (edge_client/round_messages.py)
in their JSON form. The body is a 4-byte big-endian length, that many bytes of JSON, then an
.npz archive of the weights (no pickle). Errors come back as 4xx/5xx with a JSON
{"error": ...} body.
"""

from __future__ import annotations

import http.client
import io
import ipaddress
import json
import logging
import struct
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

from dartfl.errors import ConfigError, DartflError, ProtocolError
from edge_client.round_messages import RoundOrder, RoundResult

__all__ = [
    "RoundChannelError",
    "RoundChannelServer",
    "check_local_address",
    "pack",
    "post_round",
    "request_round",
    "unpack",
]

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 256 * 1024 * 1024
Weights = dict[str, np.ndarray]
RoundHandler = Callable[[RoundOrder, Weights], tuple[RoundResult, Weights]]


class RoundChannelError(DartflError):
    """The agent refused or failed the round, or could not be reached."""


def check_local_address(address: str) -> tuple[str, int]:
    """Parse HOST:PORT and insist HOST is loopback (the channel is local-only, unauthenticated)."""
    host, sep, port_text = address.rpartition(":")
    host = host.strip("[]")
    if not sep or not port_text.isdigit() or not (0 <= int(port_text) < 65536):
        raise ConfigError(f"round channel address must be HOST:PORT, got {address!r}")
    if host != "localhost":
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise ConfigError(
                f"round channel address {address!r} is not loopback: the channel has no authentication "
                "and must stay on the device (use 127.0.0.1:PORT)"
            )
    return host, int(port_text)


def pack(meta: Mapping[str, Any], weights: Mapping[str, np.ndarray]) -> bytes:
    header = json.dumps(meta).encode()
    buf = io.BytesIO()
    arrays: dict[str, Any] = {k: np.ascontiguousarray(v) for k, v in weights.items()}
    np.savez(buf, allow_pickle=False, **arrays)
    return struct.pack(">I", len(header)) + header + buf.getvalue()


def unpack(body: bytes) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    if len(body) < 4:
        raise ProtocolError("bad-round", "round channel body is shorter than its length prefix")
    (n,) = struct.unpack(">I", body[:4])
    try:
        meta = json.loads(body[4 : 4 + n])
        loaded = np.load(io.BytesIO(body[4 + n :]), allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise ValueError("the weights are not an .npz archive")
        with loaded as npz:
            weights = {k: npz[k] for k in npz.files}
    except Exception as exc:  # empty (EOFError), truncated (BadZipFile), not JSON...: all bad input
        problem = f"{type(exc).__name__}: {exc}"
        raise ProtocolError("bad-round", f"unreadable round channel body: {problem}") from None
    if not isinstance(meta, dict):
        raise ProtocolError("bad-round", "round channel metadata must be a JSON object")
    return meta, weights


class RoundChannelServer:
    """The agent's side: serve POST /round with `handler(order, weights)` on a daemon thread."""

    def __init__(self, address: str, handler: RoundHandler, health: Callable[[], dict[str, Any]]) -> None:
        host, port = check_local_address(address)
        outer = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = 60.0  # on socket reads: a client that stalls mid-request frees its thread

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("round channel: " + format, *args)

            def _send(self, code: int, body: bytes, kind: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _error(self, code: int, text: str) -> None:
                self._send(code, json.dumps({"error": text}).encode(), "application/json")

            def do_GET(self) -> None:
                if self.path != "/health":
                    self._error(404, f"no such path {self.path}")
                    return
                self._send(200, json.dumps(outer.health()).encode(), "application/json")

            def do_POST(self) -> None:
                if self.path != "/round":
                    self._error(404, f"no such path {self.path}")
                    return
                try:
                    length = int(self.headers.get("Content-Length", "0"))
                except ValueError:
                    self._error(400, f"bad Content-Length {self.headers.get('Content-Length')!r}")
                    return
                if not 0 < length <= MAX_BODY_BYTES:
                    self._error(413, f"body of {length} bytes (max {MAX_BODY_BYTES})")
                    return
                try:
                    meta, weights = unpack(self.rfile.read(length))
                    result, out_weights = outer.handler(RoundOrder.from_json(meta), weights)
                except (ProtocolError, ConfigError) as exc:
                    self._error(400, str(exc))
                    return
                except Exception as exc:  # the agent must survive a failed round
                    log.exception("round failed")
                    self._error(500, f"{type(exc).__name__}: {exc}")
                    return
                self._send(200, pack(result.to_json(), out_weights), "application/octet-stream")

        self.handler = handler
        self.health = health
        self._server = ThreadingHTTPServer((host, port), _Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="round-channel", daemon=True)

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{host!s}:{port}"

    def start(self) -> str:
        self._thread.start()
        return self.address

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def request_round(
    address: str, order: RoundOrder, weights: Mapping[str, np.ndarray], timeout_s: float
) -> tuple[RoundResult, Weights]:
    """The ClientApp's side: hand the round to the agent and wait for its update."""
    reply, trained = post_round(address, order.to_json(), weights, timeout_s)
    return RoundResult.from_json(reply), trained


def post_round(
    address: str, meta: Mapping[str, Any], weights: Mapping[str, np.ndarray], timeout_s: float
) -> tuple[dict[str, Any], Weights]:
    """POST a round's JSON header and weights as they are; the reply's, undecoded (what
    `request_round` sends, and what a test of the agent's checks sends on purpose)."""
    host, port = check_local_address(address)
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        body = pack(meta, weights)
        conn.request("POST", "/round", body=body, headers={"Content-Type": "application/octet-stream"})
        resp = conn.getresponse()
        data = resp.read()
    except OSError as exc:
        raise RoundChannelError(f"device agent at {address} unreachable: {exc}") from None
    finally:
        conn.close()
    if resp.status != 200:
        try:
            detail = json.loads(data).get("error", "")
        except ValueError:
            detail = data[:300].decode(errors="replace")
        raise RoundChannelError(f"device agent at {address} failed the round (HTTP {resp.status}): {detail}")
    return unpack(data)
