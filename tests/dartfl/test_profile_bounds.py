"""Profile files with figures no device has: a speedup beyond its core count, more cores than
any device, a work item cheaper than any device runs one. Each stalled `dartfl sim` (a step
per work item) or was accepted; now each is one ConfigError naming the file and the key."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from dartfl.errors import ConfigError
from dartfl.profiles import (
    BUILTIN_PROFILE_NAMES,
    MAX_CORES,
    get_profile,
    load_profile_toml,
    parse_profile,
    profile_to_toml,
)

ROOT = Path(__file__).resolve().parents[2]
BASE = """name = "pf"
[inference]
batch-fixed-s = 0.001
per-request-s = 0.002
max-batch = 32
[training]
microbatch-fixed-s = {fixed}
per-sample-s = {per}
max-microbatch = 32
"""
OK = BASE.format(fixed=0.001, per=0.001)


def _load(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pf.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            "count = 3\ninference-speedup = [1.0, 1.5, 2.0]\ntraining-speedup = [1.0, 2.0, 1e6]",
            "cores.training-speedup on 3 cores must lie in [1/3, 1.5 x 3] = [0.333, 4.5] (an item's time "
            "on one core over its time on 3; e.g. training-speedup = [1.0, 1.6, 2.0, 2.3]), got 1e+06",
        ),
        (
            "count = 2\ninference-speedup = [1.0, 0.4]\ntraining-speedup = [1.0, 2.0]",
            "cores.inference-speedup on 2 cores must lie in [1/2, 1.5 x 2] = [0.5, 3]",
        ),
        ("count = 20000", "cores.count must be an integer in 1..1024 (e.g. count = 4), got 20000"),
    ],
)
def test_speedups_and_core_counts_no_device_has_are_refused(tmp_path: Path, table: str, message: str) -> None:
    path = _load(tmp_path, f"{OK}[cores]\n{table}\n")
    with pytest.raises(ConfigError) as err:
        load_profile_toml(path)
    assert str(err.value).startswith(f"{path}: {message}")


def test_the_largest_core_count_and_the_speedup_bounds_load(tmp_path: Path) -> None:
    curve = ", ".join(["1.0", "3.0", *["1.0"] * (MAX_CORES - 2)])  # 1.5 x 2 and 1/j held
    table = f"count = {MAX_CORES}\ninference-speedup = [{curve}]\ntraining-speedup = [{curve}]\n"
    profile = load_profile_toml(_load(tmp_path, f"{OK}[cores]\n{table}"))
    assert profile.cores.count == MAX_CORES and profile.cores.training_speedup[1] == 3.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            BASE.format(fixed=1e-12, per=1e-12),
            "a one-sample training microbatch would take 2e-12 s (training.microbatch-fixed-s + "
            "training.per-sample-s), under the floor of 0.0001 s that every real device exceeds; "
            "give the costs in seconds (e.g. per-sample-s = 0.005)",
        ),
        (
            BASE.format(fixed=0.0001, per=0.00001)
            + "[cores]\ncount = 2\ninference-speedup = [1.0, 1.5]\ntraining-speedup = [1.0, 2.0]\n",
            "a one-sample training microbatch would take 5.5e-05 s ((training.microbatch-fixed-s + "
            "training.per-sample-s) / cores.training-speedup on 2 cores), under the floor",
        ),
        (
            OK.replace("batch-fixed-s = 0.001", "batch-fixed-s = 0", 1).replace(
                "per-request-s = 0.002", "per-request-s = 1e-9"
            ),
            "a one-request inference batch would take 1e-09 s (inference.batch-fixed-s + "
            "inference.per-request-s), under the floor of 1e-06 s",
        ),
        (
            OK + "[inference.tasks.fashion]\nbatch-fixed-s = 0\nper-request-s = 1e-9\n",
            "a one-request inference batch (inference.tasks.fashion) would take 1e-09 s "
            "(inference.tasks.fashion.batch-fixed-s + inference.tasks.fashion.per-request-s)",
        ),
        (
            OK + "[cores]\ncount = 2\ninference-speedup = [1.0, 1.5]\ngpu = true\n"
            "cpu-batch-fixed-s = 0\ncpu-per-request-s = 1e-9\n",
            "a one-request inference batch (cores.cpu) would take 6.67e-10 s ((cores.cpu-batch-fixed-s"
            " + cores.cpu-per-request-s) / cores.inference-speedup on 2 cores)",
        ),
    ],
)
def test_a_work_item_cheaper_than_any_device_runs_one_is_refused(
    tmp_path: Path, text: str, message: str
) -> None:
    # 1e-12 s a sample made a 20 s `dartfl sim` run for hours: a step per microbatch.
    path = _load(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_profile_toml(path)
    assert str(err.value).startswith(f"{path}: {message}")


def test_the_floor_is_on_the_whole_item_not_on_each_key(tmp_path: Path) -> None:
    # A GPU's per-item cost is tiny and a fixed cost may be 0: the sum is what counts.
    text = BASE.format(fixed=0.001, per=1e-9).replace("batch-fixed-s = 0.001", "batch-fixed-s = 0", 1)
    text = text.replace("per-request-s = 0.002", "per-request-s = 1e-6")
    profile = load_profile_toml(_load(tmp_path, text))
    assert profile.training.per_sample_s == 1e-9 and profile.inference.per_request_s == 1e-6


@pytest.mark.parametrize("name", BUILTIN_PROFILE_NAMES)
def test_every_builtin_profile_keeps_the_bounds(name: str) -> None:
    profile = get_profile(name)
    assert parse_profile(tomllib.loads(profile_to_toml(profile))) == profile


def _embedded_profiles() -> list[tuple[str, str]]:
    """Profile files of the repo, and those the benchmark results keep as text."""
    found = [
        (str(p.relative_to(ROOT)), p.read_text())
        for p in sorted(ROOT.glob("**/*.toml"))
        if "profile" in str(p.relative_to(ROOT)) and ".venv" not in p.parts
    ]
    for result in sorted((ROOT / "benchmarks" / "results").glob("*.json")):
        try:
            stack = [json.loads(result.read_text())]
        except json.JSONDecodeError:
            continue  # a JSON-lines log, not a result with a profile

        while stack:
            value = stack.pop()
            if isinstance(value, dict):
                for key, item in value.items():
                    if key == "file" and isinstance(item, str) and "[inference]" in item:
                        found.append((f"{result.name}:{key}", item))
                    else:
                        stack.append(item)
            elif isinstance(value, list):
                stack.extend(value)
    return found


def test_every_profile_file_in_the_repo_keeps_the_bounds() -> None:
    files = _embedded_profiles()
    assert len(files) >= 3
    for source, text in files:
        parse_profile(tomllib.loads(text), source)
