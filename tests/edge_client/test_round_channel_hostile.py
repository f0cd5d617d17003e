"""The round channel under hostile input: what it reads is bounded by the model, a bad body
or order is refused with 400 and one line (logged once, no traceback), and nothing of a
refused round stays behind. An in-process channel on 127.0.0.1 with a stand-in handler; the
agent's side of a round (`FederatedRounds`) with a stand-in runtime."""

from __future__ import annotations

import gc
import http.client
import io
import json
import logging
import socket
import struct
import threading
import time
import weakref
import zipfile
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any, cast

import numpy as np
import pytest

from dartfl.errors import ConfigError, InputError
from edge_client.agent_rounds import FederatedRounds
from edge_client.round_channel import RoundChannelServer, WeightSpec, check_local_address, pack, post_round
from edge_client.round_messages import RoundOrder, RoundResult

SPEC = WeightSpec({"trunk.0.weight": (4, 1, 3, 3), "head.bias": (10,)})
RNG = np.random.default_rng(0)
GOOD = {name: RNG.standard_normal(shape).astype(np.float32) for name, shape in SPEC.shapes.items()}


class Channel:
    """A served round channel whose handler echoes the weights; `hold` makes it wait."""

    def __init__(self, max_connections: int = 8) -> None:
        self.calls: list[RoundOrder] = []
        self.entered = threading.Event()
        self.hold: threading.Event | None = None
        self.server = RoundChannelServer(
            "127.0.0.1:0", self._handle, lambda: {"device": "d"}, SPEC, max_connections=max_connections
        )
        self.host, self.port = check_local_address(self.server.start())

    def _handle(self, order: RoundOrder, weights: dict[str, np.ndarray]) -> tuple[RoundResult, Any]:
        self.calls.append(order)
        self.entered.set()
        if self.hold is not None:
            self.hold.wait(30)
        return RoundResult("d", {}, {}), weights

    def post(self, body: bytes, *, length: int | None = None) -> tuple[int, str]:
        """POST `body` (only the headers when `length` is given); the status and the reason."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=20)
        try:
            conn.putrequest("POST", "/round")
            conn.putheader("Content-Length", str(len(body) if length is None else length))
            conn.endheaders()
            if length is None:
                conn.send(body)
            response = conn.getresponse()
            data = response.read()
        finally:
            conn.close()
        reason = json.loads(data)["error"] if response.status != 200 else ""
        return response.status, reason


@pytest.fixture(scope="module")
def served() -> Iterator[Channel]:
    served = Channel()
    yield served
    served.server.stop()


@pytest.fixture
def channel(served: Channel) -> Iterator[Channel]:
    served.calls.clear()
    served.entered.clear()
    yield served
    if served.hold is not None:
        served.hold.set()
        served.hold = None


def _body(archive: bytes, meta: dict[str, Any] | None = None) -> bytes:
    header = json.dumps(meta or {}).encode()
    return struct.pack(">I", len(header)) + header + archive


def _npy(shape: tuple[int, ...], descr: str = "<f4", data: bytes | None = None) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    return buf.getvalue() + (bytes(int(np.prod(shape)) * np.dtype(descr).itemsize) if data is None else data)


def _savez(weights: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    arrays: dict[str, Any] = dict(weights)
    np.savez(buf, **arrays)
    return buf.getvalue()


def _zip(members: list[tuple[str, bytes]], compression: int = zipfile.ZIP_STORED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=compression) as z:
        for name, data in members:
            z.writestr(name, data)
    return buf.getvalue()


def _bomb(mib: int) -> bytes:
    """A deflated member for a real weight whose header declares 2**31 bytes, `mib` MiB of
    zeros written: a few kB that inflate to `mib` MiB (npz_bomb.py, smaller)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as z:
        f = z.open("trunk.0.weight.npy", "w", force_zip64=True)
        header = {"descr": "|u1", "fortran_order": False, "shape": (2**31,)}
        np.lib.format.write_array_header_1_0(f, header)
        for _ in range(mib):
            f.write(bytes(2**20))
        f.close()
    return buf.getvalue()


def _spy_inflated(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the bytes every zip member read hands out (what was inflated)."""
    inflated = [0]
    read = zipfile.ZipExtFile.read

    def counting(self: zipfile.ZipExtFile, n: int | None = -1) -> bytes:
        data = read(self, n)
        inflated[0] += len(data)
        return data

    monkeypatch.setattr(zipfile.ZipExtFile, "read", counting)
    return inflated


def _warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("edge_client") and r.levelno >= logging.INFO]


BAD_ARCHIVES: dict[str, tuple[Callable[[], bytes], str]] = {
    "inflates to 16 MiB": (lambda: _bomb(16), "inflates to"),
    "declares 2 GiB in its header": (
        lambda: _zip([("trunk.0.weight.npy", _npy((2**31,), "|u1", bytes(16)))]),
        "shape",
    ),
    "a weight of the wrong shape": (lambda: _savez({**GOOD, "head.bias": np.zeros(11, np.float32)}), "shape"),
    "a weight the model has not": (lambda: _zip([("nope.npy", _npy((2,)))]), "has no weight 'nope.npy'"),
    "no .npy suffix": (lambda: _zip([("head.bias", _npy((10,)))]), "has no weight"),
    "object dtype": (lambda: _zip([("head.bias.npy", _npy((10,), "|O", b""))]), "dtype"),
    "complex dtype": (lambda: _zip([("head.bias.npy", _npy((10,), "<c8"))]), "dtype"),
    "bytes past the array": (lambda: _zip([("head.bias.npy", _npy((10,)) + bytes(64))]), "header says"),
    "a weight twice": (lambda: _zip([("head.bias.npy", _npy((10,)))] * 2), "twice"),
    "bzip2": (lambda: _zip([("head.bias.npy", _npy((10,)))], zipfile.ZIP_BZIP2), "compression method"),
    "not a zip": (lambda: b"garbage", "unreadable weights"),
}


@pytest.mark.filterwarnings("ignore:Duplicate name")  # "a weight twice" writes one on purpose
@pytest.mark.parametrize("case", list(BAD_ARCHIVES))
def test_bad_weights_are_refused_from_their_headers_before_any_data_is_inflated(
    channel: Channel, case: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    make, problem = BAD_ARCHIVES[case]
    archive = make()
    body = _body(archive)
    inflated = _spy_inflated(monkeypatch)
    read_array: list[int] = []
    original = np.lib.format.read_array

    def spy(*args: Any, **kwargs: Any) -> np.ndarray:
        read_array.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(np.lib.format, "read_array", spy)
    with caplog.at_level(logging.INFO):
        status, reason = channel.post(body)
    assert status == 400 and problem in reason, reason
    assert "\n" not in reason and len(reason) <= 300
    assert inflated[0] < 64 * 1024  # headers only: the bomb would have given 16 MiB
    assert read_array == [] and channel.calls == []
    [record] = _warnings(caplog)
    assert record.levelno == logging.WARNING and record.exc_info is None and problem in record.getMessage()


def test_good_weights_pass_in_single_or_double_precision(channel: Channel) -> None:
    for weights in (GOOD, {k: v.astype(np.float64) for k, v in GOOD.items()}):
        meta, back = post_round(f"{channel.host}:{channel.port}", {"round-deadline-s": 2}, weights, 20)
        assert meta["device"] == "d" and set(back) == set(GOOD)
        assert all(np.array_equal(back[k], weights[k]) for k in GOOD)
    assert [o.deadline_s for o in channel.calls] == [2.0, 2.0]


def test_a_body_larger_than_the_model_can_need_is_refused_unread(channel: Channel) -> None:
    most = channel.server.max_body_bytes
    # Bounded by the model (2 x 46 weights at 8 bytes, headers, 64 kB of JSON), not 256 MB.
    assert most == SPEC.max_body_bytes < 100 * 1024
    assert len(pack({"round-deadline-s": 2}, {k: v.astype(np.float64) for k, v in GOOD.items()})) < most
    status, reason = channel.post(b"", length=most + 1)
    assert status == 413 and f"need {most} at most" in reason
    status, reason = channel.post(b"", length=0)
    assert status == 400 and "Content-Length" in reason
    assert channel.calls == []


def test_a_second_round_while_one_is_running_is_refused_with_409(channel: Channel) -> None:
    channel.hold = threading.Event()
    first: list[tuple[int, str]] = []
    runner = threading.Thread(target=lambda: first.append(channel.post(pack({}, GOOD))))
    runner.start()
    assert channel.entered.wait(20)
    status, reason = channel.post(pack({}, GOOD))
    assert status == 409 and "already being received or run" in reason
    channel.hold.set()
    runner.join(20)
    assert first == [(200, "")] and len(channel.calls) == 1
    assert channel.post(pack({}, GOOD))[0] == 200  # the gate opens again


def test_connections_past_the_cap_are_refused_on_accept() -> None:
    served = Channel(max_connections=1)
    try:
        address = (served.host, served.port)
        # The first connection holds the one slot; the second is answered at once.
        with (
            socket.create_connection(address, timeout=20),
            socket.create_connection(address, timeout=20) as extra,
        ):
            answer = b""
            while chunk := extra.recv(4096):
                answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503") and "busy" in json.loads(body)["error"]
    finally:
        served.server.stop()


BAD_ORDERS: list[tuple[dict[str, Any], str]] = [
    ({"round-target-samples": -5}, "round-target-samples must be an integer >= 0"),
    ({"round-target-samples": 2**53}, "round-target-samples must be an integer >= 0 and < 2**53"),
    ({"round-target-samples": 2.5}, "round-target-samples must be an integer"),
    ({"round-target-samples": True}, "round-target-samples must be an integer"),
    ({"round-deadline-s": 1e300}, "round-deadline-s must be > 0 and <= 86400 s"),
    ({"round-deadline-s": float("nan")}, "round-deadline-s must be > 0"),
    ({"round-deadline-s": "3"}, "round-deadline-s must be > 0"),
    ({"server-round": -1}, "server-round must be an integer >= 0"),
    ({"step-samples": 10**20}, "step-samples must be an integer >= 1"),
    ({"learning-rate": float("inf")}, "learning-rate must be a number > 0"),
    ({"tasks": []}, "tasks must be a list of task names"),
    ({"tasks": ["x" * 1000]}, "tasks must be a list of task names"),
    ({"policy": ""}, "policy must be a string"),
]


@pytest.mark.parametrize(("meta", "problem"), BAD_ORDERS)
def test_a_bad_order_is_refused_with_400_before_the_round_starts(
    channel: Channel, meta: dict[str, Any], problem: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        status, reason = channel.post(pack(meta, GOOD))
    assert status == 400 and problem in reason and "\n" not in reason and len(reason) <= 300
    assert channel.calls == []
    [record] = _warnings(caplog)
    assert record.levelno == logging.WARNING and record.exc_info is None


# -- the agent's side: FederatedRounds with a stand-in runtime --------------------------------


class Runtime:
    """Refuses every round's weights as fltask.model.set_weights does weights that do not fit."""

    def start_round(self, weights: Any, *_: Any) -> None:
        raise InputError("weight 'head.bias' holds NaN or infinite values")


def _rounds(runtime: object) -> FederatedRounds:
    config = SimpleNamespace(tasks=("digits",), round_s=60.0, policy=None, weighting=None, device_id="d")
    return FederatedRounds(
        cast(Any, config),
        cast(Any, runtime),
        cast(Any, None),
        threading.Condition(),
        cast(Any, None),
        lambda now: None,
    )


def test_weights_the_model_refuses_fail_the_round_without_a_traceback_and_are_let_go(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rounds = _rounds(Runtime())
    box = {"weights": {k: v.copy() for k, v in GOOD.items()}}  # the channel thread takes them
    gone = weakref.ref(box["weights"]["head.bias"])
    stopping, errors = threading.Event(), []

    def channel_thread() -> None:
        try:
            rounds.handle(RoundOrder(server_round=4, deadline_s=1.0), box.pop("weights"), stopping)
        except ConfigError as exc:
            errors.append(str(exc))

    gc.disable()  # what is let go must go by reference counts, not by a later collection
    try:
        with caplog.at_level(logging.DEBUG):
            thread = threading.Thread(target=channel_thread)
            thread.start()
            deadline = time.monotonic() + 20
            while rounds.slot.pending is None and thread.is_alive() and time.monotonic() < deadline:
                time.sleep(0.005)
            rounds.step(time.monotonic())  # the executor: install, which fails
            thread.join(20)
        assert errors == [
            "could not install the global weights: weight 'head.bias' holds NaN or infinite values"
        ]
        assert gone() is None  # neither the job, nor its error, nor the log holds the arrays
    finally:
        gc.enable()
    # The channel logs the one line as it answers 400 with that error; here, no traceback.
    assert _warnings(caplog) == [] and all(r.exc_info is None for r in caplog.records)


def test_a_round_missing_some_of_the_models_weights_is_refused() -> None:
    rounds = _rounds(Runtime())
    rounds.spec = SPEC
    partial = {"head.bias": GOOD["head.bias"]}
    stopping = threading.Event()
    stopping.set()  # a round that got past the check would fail at once, not wait for an executor
    with pytest.raises(ConfigError, match=r"1 of the model's are missing, such as 'trunk.0.weight'"):
        rounds.handle(RoundOrder(), partial, stopping)
    assert rounds.slot.pending is None
