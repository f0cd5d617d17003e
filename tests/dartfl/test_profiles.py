"""Device profiles: the built-ins, the TOML format and its error messages."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest

from dartfl import profiles
from dartfl.errors import ConfigError
from dartfl.profiles import (
    BUILTIN_PROFILE_NAMES,
    get_profile,
    load_profile_toml,
    profile_to_toml,
    resolve_profile,
)
from dartfl.types import DeviceProfile, InferenceCost, RequestPathCost, TrainingCost


def _docstring_example() -> str:
    """The TOML example that dartfl/profiles.py's docstring gives for a measured device."""
    doc = profiles.__doc__ or ""
    assert "own TOML file:\n\n" in doc, "dartfl/profiles.py's docstring lost its TOML example"
    block = doc.split("own TOML file:\n\n", 1)[1].split("\n\n", 1)[0]
    return "".join(line.removeprefix("    ") + "\n" for line in block.splitlines())


DOCSTRING_EXAMPLE = _docstring_example()
# Its required tables and a task override, without the optional [request-path] and [cores].
CONTRACT_EXAMPLE = DOCSTRING_EXAMPLE.split("[request-path]", 1)[0]


def _write(tmp_path: Path, text: str, name: str = "profile.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# --- built-in profiles -------------------------------------------------------------------------


def test_builtin_names_are_the_documented_four() -> None:
    assert set(BUILTIN_PROFILE_NAMES) == {"pi4", "pi5", "jetson-orin-nano", "x86-1core"}


@pytest.mark.parametrize("name", BUILTIN_PROFILE_NAMES)
def test_builtin_profile_is_valid_and_described(name: str) -> None:
    profile = get_profile(name)
    assert profile.name == name
    assert profile.description
    assert profile.inference.per_request_s > 0 and profile.inference.batch_fixed_s >= 0
    assert profile.training.per_sample_s > 0 and profile.training.microbatch_fixed_s >= 0
    assert profile.max_batch >= 1 and profile.training.max_microbatch >= 1
    assert not profile.task_inference


def test_cpu_profiles_are_ordered_by_speed_as_documented() -> None:
    pi4, pi5, x86 = get_profile("pi4"), get_profile("pi5"), get_profile("x86-1core")
    for slow, fast in ((pi4, pi5), (pi5, x86)):
        assert slow.inference.per_request_s > fast.inference.per_request_s
        assert slow.inference.batch_fixed_s > fast.inference.batch_fixed_s
        assert slow.training.per_sample_s > fast.training.per_sample_s
        assert slow.training.microbatch_fixed_s > fast.training.microbatch_fixed_s
    # docs/profiles.md: a Pi 5 is about 2-3.5x a Pi 4 per request.
    assert 2.0 <= pi4.inference.per_request_s / pi5.inference.per_request_s <= 3.5


def test_jetson_has_large_fixed_and_tiny_per_item_costs() -> None:
    jetson, x86 = get_profile("jetson-orin-nano"), get_profile("x86-1core")
    assert jetson.inference.per_request_s < x86.inference.per_request_s
    assert jetson.training.per_sample_s < x86.training.per_sample_s
    assert jetson.inference.batch_fixed_s > x86.inference.batch_fixed_s
    assert jetson.training.microbatch_fixed_s > x86.training.microbatch_fixed_s
    assert jetson.inference.batch_fixed_s > 4 * jetson.inference.per_request_s
    assert jetson.training.microbatch_fixed_s > 10 * jetson.training.per_sample_s


def test_pi4_full_training_microbatch_exceeds_a_250ms_slo_slack() -> None:
    training = get_profile("pi4").training
    assert training.microbatch_s(training.max_microbatch) > 0.25


def test_unknown_profile_name_lists_the_valid_names() -> None:
    with pytest.raises(ConfigError) as excinfo:
        get_profile("pi3")
    for name in BUILTIN_PROFILE_NAMES:
        assert name in str(excinfo.value)


def test_resolve_profile_takes_exactly_one_source(tmp_path: Path) -> None:
    assert resolve_profile("pi5", None) is get_profile("pi5")
    assert resolve_profile(None, _write(tmp_path, CONTRACT_EXAMPLE)).name == "edge-small"
    with pytest.raises(ConfigError, match="exactly one"):
        resolve_profile(None, None)
    with pytest.raises(ConfigError, match="exactly one"):
        resolve_profile("pi4", tmp_path / "x.toml")


# --- reading and writing -----------------------------------------------------------------------


def test_contract_example_loads_and_task_override_inherits(tmp_path: Path) -> None:
    profile = load_profile_toml(_write(tmp_path, CONTRACT_EXAMPLE))
    assert profile.name == "edge-small"
    assert profile.inference == InferenceCost(batch_fixed_s=0.004, per_request_s=0.002)
    assert profile.max_batch == 32
    assert profile.training == TrainingCost(microbatch_fixed_s=0.010, per_sample_s=0.006, max_microbatch=32)
    fashion = profile.inference_for("fashion")
    assert fashion.per_request_s == 0.003
    assert fashion.batch_fixed_s == 0.004  # inherited from [inference]
    assert profile.inference_for("mnist") == profile.inference


def test_the_whole_docstring_example_loads_with_its_request_path_and_cores(tmp_path: Path) -> None:
    profile = load_profile_toml(_write(tmp_path, DOCSTRING_EXAMPLE))
    assert profile.request_path == RequestPathCost(receive_s=6e-5, ingress_s=2e-5, egress_s=6e-5)
    # The path is priced into the task override too.
    assert profile.inference_for("fashion").per_request_s == pytest.approx(0.003 + 1.4e-4)
    assert profile.cores.count == 4 and profile.cores.inference_speedup == (1.0, 1.59, 1.98, 2.26)
    assert (profile.cores.inference_interference, profile.cores.switch_s) == (0.15, 0.005)


def test_integers_are_accepted_where_seconds_are_expected(tmp_path: Path) -> None:
    text = CONTRACT_EXAMPLE.replace("batch-fixed-s = 0.004", "batch-fixed-s = 0").replace(
        "per-sample-s = 0.006", "per-sample-s = 1"
    )
    profile = load_profile_toml(_write(tmp_path, text))
    assert profile.inference.batch_fixed_s == 0.0 and isinstance(profile.inference.batch_fixed_s, float)
    assert profile.training.per_sample_s == 1.0 and isinstance(profile.training.per_sample_s, float)


@pytest.mark.parametrize("name", BUILTIN_PROFILE_NAMES)
def test_builtin_profiles_round_trip_through_toml(tmp_path: Path, name: str) -> None:
    profile = get_profile(name)
    assert load_profile_toml(_write(tmp_path, profile_to_toml(profile))) == profile


def test_round_trip_keeps_task_overrides_and_awkward_strings(tmp_path: Path) -> None:
    profile = DeviceProfile(
        name='lab "box" \\ 1',
        inference=InferenceCost(batch_fixed_s=0.0, per_request_s=1e-5),
        max_batch=7,
        training=TrainingCost(microbatch_fixed_s=0.1 + 0.2, per_sample_s=1 / 3, max_microbatch=3),
        task_inference={
            "fashion": InferenceCost(batch_fixed_s=0.004, per_request_s=0.003),
            "digits 8x8": InferenceCost(batch_fixed_s=2.5e-4, per_request_s=1.25e-3),
        },
        description="line one\nline two\ttabbed, unicode é, control \x01",
    )
    loaded = load_profile_toml(_write(tmp_path, profile_to_toml(profile)))
    assert loaded == profile
    assert dict(loaded.task_inference) == dict(profile.task_inference)


def test_the_request_path_round_trips_and_is_priced_into_every_task(tmp_path: Path) -> None:
    path = RequestPathCost(receive_s=6e-5, ingress_s=2e-5, egress_s=5e-5, per_batch_s=1e-5)
    profile = replace(get_profile("x86-1core"), request_path=path)
    loaded = load_profile_toml(_write(tmp_path, profile_to_toml(profile)))
    assert loaded == profile and "[request-path]" in profile_to_toml(profile)
    model, end_to_end = profile.model_inference_for("any"), profile.inference_for("any")
    assert end_to_end.per_request_s == pytest.approx(model.per_request_s + 1.3e-4)
    assert end_to_end.batch_fixed_s == pytest.approx(model.batch_fixed_s + 1e-5)
    # Capacity and everything sized from it count the path too.
    model_only = replace(profile, request_path=RequestPathCost())
    assert profile.capacity_per_s(("any",), (1.0,)) < model_only.capacity_per_s(("any",), (1.0,))


def test_a_file_without_a_request_path_reads_as_before(tmp_path: Path) -> None:
    text = profile_to_toml(replace(get_profile("x86-1core"), request_path=RequestPathCost()))
    assert "[request-path]" not in text
    assert load_profile_toml(_write(tmp_path, text)).request_path == RequestPathCost()


def test_unknown_extra_keys_are_accepted_and_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    text = (
        'vendor = "acme"\n'
        + CONTRACT_EXAMPLE.replace("max-batch = 32", "max-batch = 32\nthreads = 4")
        + "[power]\nidle-w = 2.5\n"
        + "[inference.tasks.digits]\nper-request-s = 0.001\nmodel-file = 'digits.onnx'\n"
    )
    with caplog.at_level(logging.DEBUG, logger="dartfl.profiles"):
        profile = load_profile_toml(_write(tmp_path, text))
    assert profile.inference_for("digits").per_request_s == 0.001
    logged = caplog.text
    for key in ("vendor", "power", "inference.threads", "inference.tasks.digits.model-file"):
        assert key in logged


def test_a_misspelt_key_is_a_warning_that_names_the_key_meant(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # `per_request_s` for `per-request-s` silently kept the default cost (logged at debug only).
    text = CONTRACT_EXAMPLE.replace("per-request-s = 0.003", "per_request_s = 0.003")
    with caplog.at_level(logging.WARNING, logger="dartfl.profiles"):
        load_profile_toml(_write(tmp_path, text))
    assert (
        "inference.tasks.fashion.per_request_s (did you mean inference.tasks.fashion.per-request-s?)"
        in caplog.text
    )


# --- bad input: every error names the file and the key -----------------------------------------


def test_missing_file_is_a_config_error_naming_the_path(tmp_path: Path) -> None:
    path = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match=r"nope\.toml") as excinfo:
        load_profile_toml(path)
    assert "not found" in str(excinfo.value)


def test_invalid_toml_keeps_the_line_number(tmp_path: Path) -> None:
    path = _write(tmp_path, 'name = "x"\n[inference\nper-request-s = 1\n')
    with pytest.raises(ConfigError) as excinfo:
        load_profile_toml(path)
    message = str(excinfo.value)
    assert "profile.toml" in message and "not valid TOML" in message and "line 2" in message


def test_non_utf8_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes(b'name = "caf\xe9"\n')
    with pytest.raises(ConfigError, match=r"latin1\.toml"):
        load_profile_toml(path)


@pytest.mark.parametrize(
    ("edit", "key", "expected"),
    [
        # missing keys and tables
        (('name = "edge-small"\n', ""), "name", "missing"),
        (("per-sample-s = 0.006\n", ""), "training.per-sample-s", "missing"),
        (("max-batch = 32\n", ""), "inference.max-batch", "missing"),
        (("[training]\n", "[trainning]\n"), "[training]", "missing"),
        # wrong types
        (("per-sample-s = 0.006", 'per-sample-s = "fast"'), "training.per-sample-s", "number"),
        (("max-batch = 32", "max-batch = 32.0"), "inference.max-batch", "integer"),
        (("max-microbatch = 32", 'max-microbatch = "32"'), "training.max-microbatch", "integer"),
        (('name = "edge-small"', "name = 3"), "name", "string"),
        (('name = "edge-small"', 'name = ""'), "name", "non-empty"),
        (
            ("per-request-s = 0.003", "per-request-s = [0.003]"),
            "inference.tasks.fashion.per-request-s",
            "number",
        ),
        # booleans are not numbers
        (("per-sample-s = 0.006", "per-sample-s = true"), "training.per-sample-s", "number"),
        (("max-batch = 32", "max-batch = true"), "inference.max-batch", "integer"),
        # out-of-range values
        (("batch-fixed-s = 0.004", "batch-fixed-s = -0.004"), "inference.batch-fixed-s", ">= 0"),
        (("per-request-s = 0.002", "per-request-s = 0"), "inference.per-request-s", "> 0"),
        (("microbatch-fixed-s = 0.010", "microbatch-fixed-s = nan"), "training.microbatch-fixed-s", ">= 0"),
        (("per-sample-s = 0.006", "per-sample-s = inf"), "training.per-sample-s", "> 0"),
        (("max-microbatch = 32", "max-microbatch = 0"), "training.max-microbatch", ">= 1"),
        (("per-request-s = 0.003", "per-request-s = -1"), "inference.tasks.fashion.per-request-s", "> 0"),
    ],
)
def test_bad_values_raise_config_error_naming_file_key_and_expectation(
    tmp_path: Path, edit: tuple[str, str], key: str, expected: str
) -> None:
    old, new = edit
    assert old in CONTRACT_EXAMPLE
    path = _write(tmp_path, CONTRACT_EXAMPLE.replace(old, new, 1))
    with pytest.raises(ConfigError) as excinfo:
        load_profile_toml(path)
    message = str(excinfo.value)
    assert str(path) in message
    assert key in message
    assert expected in message


_BASE = 'name = "x"\n'
_INFERENCE = "[inference]\nbatch-fixed-s = 0\nper-request-s = 1\nmax-batch = 1\n"
_TRAINING = "[training]\nmicrobatch-fixed-s = 0\nper-sample-s = 1\nmax-microbatch = 1\n"


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (_BASE + "inference = 3\n" + _TRAINING, "inference"),
        (_BASE + 'training = "fast"\n' + _INFERENCE, "training"),
        (_BASE + _INFERENCE + "tasks = 5\n" + _TRAINING, "inference.tasks"),
        (_BASE + _INFERENCE + _TRAINING + "[inference.tasks]\nfashion = 0.003\n", "inference.tasks.fashion"),
    ],
)
def test_a_value_where_a_table_belongs_is_a_config_error(tmp_path: Path, text: str, key: str) -> None:
    with pytest.raises(ConfigError, match="table") as excinfo:
        load_profile_toml(_write(tmp_path, text))
    assert f"{key} must be a table" in str(excinfo.value)


# --- cores ----------------------------------------------------------------------------------

CORES_TOML = (
    CONTRACT_EXAMPLE
    + """
[cores]
count = 2
inference-speedup = [1.0, 1.8, 2.5]
training-speedup = [1, 1.5]
inference-interference = 0.2
switch-s = 0.01
"""
)


def test_builtin_devices_are_whole_devices_whose_one_core_points_are_the_old_profiles() -> None:
    counts = {name: get_profile(name).cores.count for name in BUILTIN_PROFILE_NAMES}
    assert counts == {"pi4": 4, "pi5": 4, "jetson-orin-nano": 6, "x86-1core": 1}
    assert get_profile("jetson-orin-nano").cores.has_gpu
    pi4 = get_profile("pi4")
    # The costs of one core are today's one-core figures (docs/profiles.md's first table).
    assert (pi4.inference.batch_fixed_s, pi4.inference.per_request_s) == (0.0010, 0.0050)
    assert pi4.with_cores(1).lane_inference("x", 1) == pi4.inference_for("x")
    whole = pi4.time_shared()
    assert whole.training.microbatch_s(32) == pytest.approx(pi4.training.microbatch_s(32) / 2.26, rel=1e-3)
    # On all four cores the model runs 2.26x faster; the request path (MQTT, JSON) does not.
    per_request = pi4.inference.cheapest_per_request_s(32) / 2.26 + pi4.request_path.per_request_s
    assert pi4.capacity_per_s(("x",), (1.0,)) == pytest.approx(1.0 / per_request, rel=1e-3)


def test_a_file_without_cores_is_a_one_core_device_and_cores_round_trip(tmp_path: Path) -> None:
    old = load_profile_toml(_write(tmp_path, CONTRACT_EXAMPLE))
    assert old.cores.count == 1 and old.time_shared() is old
    assert "[cores]" not in profile_to_toml(old)  # it writes what older readers know
    new = load_profile_toml(_write(tmp_path, CORES_TOML, "cores.toml"))
    assert new.cores.count == 2 and new.cores.inference_speedup == (1.0, 1.8)  # cut to count
    assert new.cores.training_interference == 0.0 and new.cores.switch_s == 0.01
    again = load_profile_toml(_write(tmp_path, profile_to_toml(new), "again.toml"))
    assert again == new
    for name in BUILTIN_PROFILE_NAMES:
        text = profile_to_toml(get_profile(name))
        assert load_profile_toml(_write(tmp_path, text, f"{name}.toml")) == get_profile(name)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            "count = 2\ninference-speedup = [1.0]\ntraining-speedup = [1.0, 2.0]",
            "inference-speedup must be a list of at least 2",
        ),
        ("count = 2\ninference-speedup = [1.2, 2.0]\ntraining-speedup = [1.0, 2.0]", "starting at 1.0"),
        ("count = 2\ntraining-speedup = [1.0, 2.0]", "missing required key cores.inference-speedup"),
        ("count = 0", "cores.count must be an integer >= 1"),
        ("count = 2\ninference-speedup = [1, 2]\ngpu = true", "missing required key cores.cpu-batch-fixed-s"),
        ("count = 2\ninference-speedup = [1, 2]\ntraining-speedup = [1, 2]\nswitch-s = -1", "cores.switch-s"),
    ],
)
def test_bad_cores_tables_name_the_file_and_key(tmp_path: Path, table: str, message: str) -> None:
    path = _write(tmp_path, CONTRACT_EXAMPLE + "\n[cores]\n" + table + "\n")
    with pytest.raises(ConfigError, match=message) as err:
        load_profile_toml(path)
    assert str(err.value).count(str(path)) == 1  # was "p.toml: [cores]: p.toml: cores...."


def test_a_bad_cores_count_suggests_a_plausible_core_count(tmp_path: Path) -> None:
    path = _write(tmp_path, CONTRACT_EXAMPLE + "\n[cores]\ncount = 0\n")
    with pytest.raises(ConfigError) as err:
        load_profile_toml(path)
    assert str(err.value) == f"{path}: cores.count must be an integer >= 1 (e.g. count = 4), got 0"


def test_an_infinite_speedup_is_refused_naming_the_file_once(tmp_path: Path) -> None:
    table = "count = 2\ninference-speedup = [1.0, inf]\ntraining-speedup = [1.0, 2.0]"
    path = _write(tmp_path, CONTRACT_EXAMPLE + "\n[cores]\n" + table + "\n")
    with pytest.raises(ConfigError, match=r"cores\.inference-speedup must be") as err:
        load_profile_toml(path)
    assert str(err.value).count(str(path)) == 1


@pytest.mark.parametrize(
    ("line", "meant"),
    [
        ("per-request-s = 0.002", "inference.per-request-s"),  # above [inference], not in it
        ("per_request_s = 0.002", "inference.per-request-s"),
        ("count = 4", "cores.count"),
        ("microbatch-fixed-s = 0.01", "training.microbatch-fixed-s"),
        ("nmae = 'x'", "name"),  # a top-level key of its own still wins
    ],
)
def test_a_top_level_key_that_belongs_in_a_table_is_pointed_there(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, line: str, meant: str
) -> None:
    # `per-request-s` at the top level was answered with "did you mean request-path?".
    with caplog.at_level(logging.WARNING, logger="dartfl.profiles"):
        load_profile_toml(_write(tmp_path, line + "\n" + CONTRACT_EXAMPLE))
    assert f"(did you mean {meant}?)" in caplog.text


def test_any_profile_runs_on_fewer_cores_but_not_more() -> None:
    pi5 = get_profile("pi5")
    two = pi5.with_cores(2)
    assert two.cores.count == 2 and two.cores.inference_speedup == pi5.cores.inference_speedup[:2]
    with pytest.raises(ConfigError, match=r"1\.\.4"):
        pi5.with_cores(5)
