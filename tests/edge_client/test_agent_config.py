"""AgentConfig: how the agent's settings become its executor's."""

from __future__ import annotations

import dataclasses

import pytest

from dartfl.errors import ConfigError
from dartfl.executor.batch_hold import batch_hold_s
from dartfl.profiles import get_profile
from dartfl.types import CoreModel, InferenceCost
from edge_client.agent_config import AgentConfig


def test_the_executor_gets_a_second_lane_only_when_asked_and_the_profile_has_cores_to_split() -> None:
    one_core = get_profile("x86-1core")
    two_cores = dataclasses.replace(one_core, cores=CoreModel(2, (1.0, 1.8), (1.0, 1.8), 0.05, 0.05, 0.01))
    split = AgentConfig(split_cores=True)
    assert split.executor_config(two_cores).lanes == 2
    assert split.executor_config(one_core).lanes == 1
    assert AgentConfig().executor_config(two_cores).lanes == 1


def test_a_time_shared_agent_plans_on_the_cores_its_threads_use() -> None:
    # A one-thread agent given a 4-core profile planned with the 4-core speed (training 2.2x
    # faster than it ran), and the simulator on that profile predicted 2.1x its samples.
    pi4 = get_profile("pi4")
    assert pi4.cores.count == 4
    one = AgentConfig().device_profile(pi4)
    assert one.cores.count == 1
    assert one.time_shared().training == pi4.with_cores(1).training
    assert one.time_shared().training.per_sample_s > 2 * pi4.time_shared().training.per_sample_s
    assert AgentConfig(inference_threads=2, training_threads=4).device_profile(pi4) is pi4
    assert AgentConfig(training_threads=2).device_profile(pi4).cores.count == 2
    assert AgentConfig(training_threads=8).device_profile(pi4) is pi4  # more threads than cores
    assert AgentConfig(split_cores=True).device_profile(pi4) is pi4  # the lanes take every core
    jetson = get_profile("jetson-orin-nano")
    assert AgentConfig().device_profile(jetson) is jetson  # time sharing runs on its GPU


def test_the_executor_holds_batches_within_the_period_and_keeps_the_agents_own_settings() -> None:
    # A width-1 model as the agent measures it: 50 us a request, so a batch fits in a hold.
    fast = dataclasses.replace(get_profile("x86-1core"), inference=InferenceCost(1e-4, 5e-5))
    config = AgentConfig(slo_s=0.1, period_s=0.05, deadline_admission=False)
    executor = config.executor_config(fast)
    assert executor.batch_hold_s == batch_hold_s(0.1, 5e-5) > 0
    # A slow model's full batch outlasts any hold: nothing to share, so no hold.
    assert config.executor_config(get_profile("pi4")).batch_hold_s == 0.0
    # A control period shorter than the hold bounds it (the executor refuses a longer hold).
    short = AgentConfig(slo_s=1.0, period_s=0.002)
    assert short.executor_config(fast).batch_hold_s == 0.002
    assert executor.period_s == config.period_s and not executor.deadline_admission
    assert [(t.name, t.slo_s) for t in config.task_specs()] == [(name, 0.1) for name in config.tasks]


def test_a_bad_setting_is_refused_before_anything_is_built() -> None:
    with pytest.raises(ConfigError, match="period-s"):
        AgentConfig(period_s=0.0)
