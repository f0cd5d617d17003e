"""One agent per --model-dir: a second one stops with one line naming the first one's pid,
and a lock left by a dead agent does not block its restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from dartfl.errors import ConfigError
from dartfl.profiles import get_profile
from edge_client.agent import Agent, AgentConfig
from edge_client.model_versions import LOCK_FILE, ModelDirLock
from messaging.errors import MqttWaitStoppedError

# A process that holds the lock until killed, saying when it does.
HOLDER = (
    "import sys, time; from pathlib import Path; from edge_client.model_versions import ModelDirLock; "
    "ModelDirLock.acquire(Path(sys.argv[1])); print('held', flush=True); time.sleep(60)"
)


def test_a_second_acquisition_is_refused_naming_the_holder_until_the_first_lets_go(tmp_path: Path) -> None:
    first = ModelDirLock.acquire(tmp_path / "md")  # made if missing
    with pytest.raises(ConfigError) as refused:
        ModelDirLock.acquire(tmp_path / "md")
    message = str(refused.value)
    assert message.startswith(f"--model-dir {tmp_path / 'md'} is in use by another agent (pid {os.getpid()})")
    assert "\n" not in message
    first.release()
    first.release()  # idempotent
    ModelDirLock.acquire(tmp_path / "md").release()


def test_a_lock_left_by_a_killed_agent_does_not_block(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError, match=rf"in use by another agent \(pid {holder.pid}\)"):
            ModelDirLock.acquire(tmp_path)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
    assert (tmp_path / LOCK_FILE).exists()  # left behind, as a SIGKILL leaves it
    ModelDirLock.acquire(tmp_path).release()


def test_a_model_dir_that_cannot_hold_a_lock_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(ConfigError, match=r"^--model-dir .*file: cannot open its lock file"):
        ModelDirLock.acquire(tmp_path / "file")


def test_edge_run_on_a_model_dir_in_use_exits_2_with_one_line(tmp_path: Path) -> None:
    held = ModelDirLock.acquire(tmp_path)
    try:
        # The broker is never reached: the lock is taken before anything loads or connects.
        cmd = [sys.executable, "-m", "dartfl.cli.main", "edge", "run", "--broker", "mqtt://127.0.0.1:1"]
        done = subprocess.run(
            [*cmd, "--device", "dev3", "--model-dir", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=Path(__file__).resolve().parents[2],
        )
    finally:
        held.release()
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        f"dartfl: error: --model-dir {tmp_path} is in use by another agent (pid {os.getpid()}); "
        "stop it, or give this agent another --model-dir"
    )


def test_an_agent_holds_its_model_dir_from_create_until_it_stops(tmp_path: Path) -> None:
    config = AgentConfig(
        device_id="locker", broker_url="mqtt://127.0.0.1:9", max_train_per_task=100, model_dir=tmp_path
    )
    agent = Agent.create(config, get_profile("x86-1core"))
    with pytest.raises(ConfigError, match="is in use by another agent"):
        ModelDirLock.acquire(tmp_path)
    threading.Timer(0.5, agent.request_stop).start()
    with pytest.raises(MqttWaitStoppedError):
        agent.start()  # nothing listens on the discard port: it waits until stopped, then lets go
    ModelDirLock.acquire(tmp_path).release()


def test_an_agent_that_cannot_be_built_lets_go_of_its_model_dir(tmp_path: Path) -> None:
    config = AgentConfig(tasks=("no-such-task",), max_train_per_task=100, model_dir=tmp_path)
    with pytest.raises(ConfigError, match="no-such-task"):
        Agent.create(config, get_profile("x86-1core"))
    ModelDirLock.acquire(tmp_path).release()
