"""The round channel's body: a JSON order or result, then the weights as an .npz archive.

    body = 4-byte big-endian length | that many bytes of JSON | .npz (no pickle)

The channel is unauthenticated, so what it reads is bounded by the model (`WeightSpec`): a body
no larger than the model's weights can be, and each .npz member's name, dtype and shape checked
from the zip directory and its .npy header before any array data is inflated
(edge_client/round_channel.py serves it).
"""

from __future__ import annotations

import io
import json
import math
import struct
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from dartfl.errors import ConfigError, ProtocolError
from dartfl.protocol.jsonwire import short

__all__ = ["MAX_META_BYTES", "WeightSpec", "Weights", "pack", "read_weights", "split_body", "unpack"]

MAX_META_BYTES = 64 * 1024  # an order or a result is a few hundred bytes of JSON
NPY_HEADER_BYTES = 4096  # the most an .npy member's header may take (numpy writes 128 bytes)
MAX_ITEMSIZE = 8  # float64 at most: the server may average in double precision
ZIP_MEMBER_BYTES = 256  # a member's local and central headers, zip64 extras, data descriptor
ZIP_END_BYTES = 22 + 56 + 20  # the end of central directory, zip64's record and its locator

Weights = dict[str, np.ndarray]


@dataclass(frozen=True)
class WeightSpec:
    """The names and shapes of a model's weights: all a round's .npz may hold, and so the
    bound on what the channel reads."""

    shapes: Mapping[str, tuple[int, ...]]

    def __post_init__(self) -> None:
        for name, shape in self.shapes.items():
            if not all(type(n) is int and n >= 0 for n in shape):
                raise ConfigError(f"weight {name!r} has shape {shape!r}; expected a tuple of sizes >= 0")

    @classmethod
    def like(cls, weights: Mapping[str, Any]) -> WeightSpec:
        """The spec of `weights` (numpy arrays or torch tensors: anything with a shape)."""
        return cls({str(name): tuple(int(n) for n in value.shape) for name, value in weights.items()})

    def member_bytes(self, name: str) -> int:
        """The most weight `name`'s .npy member can hold, uncompressed."""
        return NPY_HEADER_BYTES + math.prod(self.shapes[name]) * MAX_ITEMSIZE

    @property
    def max_body_bytes(self) -> int:
        """The largest round body these weights can need: stored or deflated members (deflate's
        worst case on incompressible data is 0.03% larger), zip headers, the JSON header."""
        members = sum(
            (data := self.member_bytes(name)) + data // 1000 + 64 + ZIP_MEMBER_BYTES + 2 * len(name.encode())
            for name in self.shapes
        )
        return 4 + MAX_META_BYTES + ZIP_END_BYTES + members

    def missing(self, weights: Mapping[str, Any]) -> list[str]:
        return sorted(set(self.shapes) - set(weights))


def pack(meta: Mapping[str, Any], weights: Mapping[str, np.ndarray]) -> bytes:
    header = json.dumps(meta).encode()
    buf = io.BytesIO()
    arrays: dict[str, Any] = {k: np.ascontiguousarray(v) for k, v in weights.items()}
    np.savez(buf, allow_pickle=False, **arrays)
    return struct.pack(">I", len(header)) + header + buf.getvalue()


def split_body(body: bytes) -> tuple[dict[str, Any], bytes]:
    """A body's JSON header, decoded, and its .npz archive, unread."""
    if len(body) < 4:
        raise ProtocolError("bad-round", "round channel body is shorter than its length prefix")
    (n,) = struct.unpack(">I", body[:4])
    if n > min(MAX_META_BYTES, len(body) - 4):
        raise ProtocolError(
            "bad-round", f"round channel header of {n} bytes (max {MAX_META_BYTES}, body {len(body)})"
        )
    try:
        meta = json.loads(body[4 : 4 + n])
    except ValueError as exc:  # not UTF-8, not JSON
        problem = f"{type(exc).__name__}: {exc}"
    else:
        if not isinstance(meta, dict):
            raise ProtocolError("bad-round", "round channel metadata must be a JSON object")
        return meta, body[4 + n :]
    raise ProtocolError("bad-round", f"unreadable round channel header: {problem}")


def read_weights(archive: bytes, spec: WeightSpec) -> Weights:
    """The arrays of an .npz `archive`, each a weight of `spec` (some may be missing: see
    `WeightSpec.missing`). Every member's name, compression, size, dtype and shape is checked
    from the zip directory and its .npy header before any member's data is read, so a small
    archive that would inflate to gigabytes is refused having inflated a few hundred bytes."""
    try:
        with zipfile.ZipFile(io.BytesIO(archive)) as npz:
            members: dict[str, zipfile.ZipInfo] = {}
            for info in npz.infolist():  # 1. the headers only
                name = _check_member(npz, info, spec)
                if name in members:
                    raise ProtocolError("bad-round", f"the weights hold {name!r} twice")
                members[name] = info
            weights: Weights = {}
            for name, info in members.items():  # 2. the data, whose sizes are now known
                with npz.open(info) as member:
                    weights[name] = np.lib.format.read_array(
                        member, allow_pickle=False, max_header_size=NPY_HEADER_BYTES
                    )
            return weights
    except ProtocolError as exc:
        problem = exc.detail
    except Exception as exc:  # empty, truncated (BadZipFile), encrypted, a bad header...: bad input
        problem = f"unreadable weights: {type(exc).__name__}: {exc}"
    # Raised out here, without the failed read's frames as its context: nothing of the
    # refused round stays referenced.
    raise ProtocolError("bad-round", problem)


def _check_member(npz: zipfile.ZipFile, info: zipfile.ZipInfo, spec: WeightSpec) -> str:
    """The weight that member `info` holds, checked against `spec` without reading its data."""
    filename = info.filename
    name = filename[:-4] if filename.endswith(".npy") else None
    if name is None or name not in spec.shapes:
        raise ProtocolError(
            "bad-round", f"cannot install the round's weights: the model has no weight {short(filename)}"
        )
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise ProtocolError(
            "bad-round",
            f"weight {name!r} uses zip compression method {info.compress_type}; only stored or deflated",
        )
    if info.file_size > spec.member_bytes(name):
        raise ProtocolError(
            "bad-round",
            f"weight {name!r} inflates to {info.file_size} bytes; "
            f"the model's needs at most {spec.member_bytes(name)}",
        )
    with npz.open(info) as member:
        version = np.lib.format.read_magic(member)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(member, NPY_HEADER_BYTES)
        elif version == (2, 0):
            shape, _, dtype = np.lib.format.read_array_header_2_0(member, NPY_HEADER_BYTES)
        else:
            raise ProtocolError(
                "bad-round", f"weight {name!r} is an .npy of version {version}; expected 1.0 or 2.0"
            )
        data_at = member.tell()
    if dtype.kind not in "fiu" or dtype.itemsize > MAX_ITEMSIZE or dtype.fields is not None:
        raise ProtocolError(
            "bad-round", f"weight {name!r} has dtype {short(str(dtype))}; expected a real number type"
        )
    if shape != spec.shapes[name]:
        raise ProtocolError(
            "bad-round",
            f"cannot install the round's weights: {name!r} has shape {short(shape)}, "
            f"the model's is {spec.shapes[name]}",
        )
    expected = data_at + math.prod(shape) * dtype.itemsize
    if info.file_size != expected:
        raise ProtocolError(
            "bad-round", f"weight {name!r} is {info.file_size} bytes; its header says {expected}"
        )
    return name


def unpack(body: bytes, spec: WeightSpec) -> tuple[dict[str, Any], Weights]:
    """A body's JSON header and its weights, checked against `spec` (see `read_weights`)."""
    meta, archive = split_body(body)
    return meta, read_weights(archive, spec)
