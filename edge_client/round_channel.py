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
{"error": ...} body of one line.

The channel is unauthenticated, so what it reads is bounded: by the model, for the body
(`WeightSpec` in edge_client/round_body.py checks every .npz member before any array data is
inflated), and here, one round received or run at a time and a few connections at once.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import logging
import sys
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

from dartfl.errors import ConfigError, DartflError, InputError
from dartfl.protocol.jsonwire import short
from edge_client.round_body import Weights, WeightSpec, pack, read_weights, split_body, unpack
from edge_client.round_messages import RoundOrder, RoundResult

__all__ = [
    "RoundChannelError",
    "RoundChannelServer",
    "WeightSpec",
    "check_local_address",
    "pack",
    "post_round",
    "read_weights",
    "request_round",
    "unpack",
]

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 8  # concurrent connections; more are refused with 503 on accept
MAX_REASON_CHARS = 300
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


def _error_json(text: str) -> bytes:
    return json.dumps({"error": one_line(text)}).encode()


def one_line(text: str) -> str:
    """`text` as one line of at most MAX_REASON_CHARS characters (a reason sent or logged)."""
    line = " ".join(text.split())
    return line if len(line) <= MAX_REASON_CHARS else line[: MAX_REASON_CHARS - 3] + "..."


class _BoundedServer(ThreadingHTTPServer):
    """A thread per connection, at most `max_connections` of them: one more is answered 503
    on accept and closed (a flood of connections must not become a flood of threads)."""

    daemon_threads = True

    def __init__(
        self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], max_connections: int
    ) -> None:
        super().__init__(address, handler)
        self._slots = threading.BoundedSemaphore(max_connections)
        self._max_connections = max_connections

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            reason = f"the round channel is busy ({self._max_connections} connections); retry later"
            log.warning("round channel: refused a connection: %s", reason)
            body = _error_json(reason)
            head = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            head += f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            try:
                request.settimeout(1.0)  # a small write to a fresh socket: it never waits long
                request.sendall(head.encode() + body)
            except OSError:
                pass  # the client is gone already: nothing to tell it
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hung up mid-reply: one line, not socketserver's traceback on stderr.
        exc = sys.exc_info()[1]
        log.warning("round channel: connection from %s failed: %s", client_address, one_line(repr(exc)))


class RoundChannelServer:
    """The agent's side: serve POST /round with `handler(order, weights)` on a daemon thread.

    `spec` is the model's weights: what a round may bring, and so how large a body can be.
    One round is received or run at a time; a POST meanwhile is answered 409 at once."""

    def __init__(
        self,
        address: str,
        handler: RoundHandler,
        health: Callable[[], dict[str, Any]],
        spec: WeightSpec,
        *,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        host, port = check_local_address(address)
        if max_connections < 1:
            raise ConfigError(f"max_connections must be >= 1, got {max_connections}")
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
                if self.close_connection:
                    self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(body)

            def _error(self, code: int, text: str) -> None:
                self._send(code, _error_json(text), "application/json")

            def _refuse(self, code: int, text: str) -> None:
                """Bad input or a busy channel: one log line and a one-line reason."""
                log.warning("round channel: refused a round (HTTP %d): %s", code, one_line(text))
                self._error(code, text)

            def _discard(self, length: int) -> bool:
                """Read and drop a body we will not use, so the client reads our answer; False if
                the client hung up first."""
                while length > 0:
                    chunk = self.rfile.read(min(length, 64 * 1024))
                    if not chunk:
                        return False
                    length -= len(chunk)
                return True

            def do_GET(self) -> None:
                if self.path != "/health":
                    self._error(404, f"no such path {short(self.path)}")
                    return
                self._send(200, json.dumps(outer.health()).encode(), "application/json")

            def do_POST(self) -> None:
                text = self.headers.get("Content-Length", "")
                length = int(text) if text.isascii() and text.isdigit() and len(text) < 16 else -1
                if self.path != "/round" or length <= 0 or length > outer.max_body_bytes:
                    self.close_connection = True  # the body stays unread
                    if self.path != "/round":
                        self._error(404, f"no such path {short(self.path)}")
                    elif length <= 0:
                        self._refuse(400, f"bad Content-Length {short(text)}: expected a body of bytes > 0")
                    else:
                        most = outer.max_body_bytes
                        self._refuse(413, f"body of {length} bytes; this model's rounds need {most} at most")
                    return
                if not outer.round_gate.acquire(blocking=False):
                    if self._discard(length):
                        self._refuse(
                            409, "a round is already being received or run on this device; retry when it ends"
                        )
                    return
                try:
                    reply = self._round(length)
                finally:
                    outer.round_gate.release()  # before answering: the client may post again at once
                if reply is not None:
                    self._send(*reply)

            def _round(self, length: int) -> tuple[int, bytes, str] | None:
                """Receive and run one round (under the gate): the reply, None if the client left."""
                body = self.rfile.read(length)
                if len(body) < length:  # the client hung up mid-body: nobody to answer
                    log.warning("round channel: client sent %d of %d bytes and hung up", len(body), length)
                    self.close_connection = True
                    return None
                try:
                    meta, archive = split_body(body)
                    del body
                    order = RoundOrder.from_json(meta)
                    weights = read_weights(archive, outer.spec)
                    del archive
                    result, out_weights = outer.handler(order, weights)
                except InputError as exc:  # a bad body, order or weights; a busy or stopping agent
                    log.warning("round channel: refused a round (HTTP 400): %s", one_line(str(exc)))
                    return 400, _error_json(str(exc)), "application/json"
                except Exception as exc:  # the agent must survive a failed round
                    log.exception("round failed")
                    return 500, _error_json(f"{type(exc).__name__}: {exc}"), "application/json"
                return 200, pack(result.to_json(), out_weights), "application/octet-stream"

        self.handler = handler
        self.health = health
        self.spec = spec
        self.max_body_bytes = spec.max_body_bytes
        self.round_gate = threading.Lock()  # held while a round is received and run
        self._server = _BoundedServer((host, port), _Handler, max_connections)
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
    `request_round` sends, and what a test of the agent's checks sends on purpose). The
    reply's weights may have only the names and shapes of those sent."""
    host, port = check_local_address(address)
    spec = WeightSpec.like(weights)
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        body = pack(meta, weights)
        conn.request("POST", "/round", body=body, headers={"Content-Type": "application/octet-stream"})
        resp = conn.getresponse()
        data = resp.read(spec.max_body_bytes + 1)  # a reply larger than that is refused below
    except OSError as exc:
        raise RoundChannelError(f"device agent at {address} unreachable: {exc}") from None
    finally:
        conn.close()
    if resp.status != 200:
        try:
            detail = json.loads(data).get("error", "")
        except (ValueError, AttributeError):
            detail = data[:300].decode(errors="replace")
        raise RoundChannelError(f"device agent at {address} failed the round (HTTP {resp.status}): {detail}")
    if len(data) > spec.max_body_bytes:
        raise RoundChannelError(
            f"device agent at {address} replied with more than {spec.max_body_bytes} bytes"
        )
    return unpack(data, spec)
