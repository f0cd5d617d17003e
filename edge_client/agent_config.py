"""How one device agent runs: every field has a flag in `dartfl edge run`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from dartfl.errors import ConfigError
from dartfl.executor import ExecutorConfig
from dartfl.executor.batch_hold import batch_hold_s
from dartfl.policies import FutureAwarePolicy, make_policy, natural_loss_weighting
from dartfl.protocol import REPLY_TOPIC_RULES, ReplyTopicRule
from dartfl.types import DeviceProfile, TaskSpec
from messaging.security import MqttSecurity

__all__ = ["ORT_PROVIDER_NAMES", "AgentConfig", "check_agent_policy"]

# ONNX Runtime execution providers by name (edge_client.inference.ORT_PROVIDERS maps them).
ORT_PROVIDER_NAMES = ("cpu", "cuda", "tensorrt")
DECISIONS_KEPT = 4096  # decision times kept for telemetry (bounded: the agent runs for months)
ADMITTED_LATE = 0.02  # admission steers its margin until this share of admitted requests miss


def check_agent_policy(policy: str, loss_weighting: str | None = None) -> None:
    """ConfigError unless a device agent can run `policy`: a bad spec, or one that needs future
    arrivals. Commands that hand a policy to agents (`edge replay --spawn-agent`, `fl app`,
    `fl deploy-local`) call it before they start anything."""
    if isinstance(make_policy(policy, loss_weighting), FutureAwarePolicy):
        raise ConfigError(f"policy {policy!r} needs future arrivals: it runs in `dartfl sim` only")


@dataclass(frozen=True)
class AgentConfig:
    """How one device agent runs; every field has a flag in `dartfl edge run`."""

    device_id: str = "edge-1"
    broker_url: str | None = None  # None: start a private Mosquitto on a free loopback port
    tasks: tuple[str, ...] = ("digits", "fashion", "uci-digits")
    slo_s: float = 0.25
    queue_capacity: int = 256
    period_s: float = 0.25
    policy: str = "dart"
    loss_weighting: str | None = None
    width: float = 1.0
    inference_threads: int = 1
    training_threads: int = 1
    ort_provider: str = "cpu"  # one of ORT_PROVIDER_NAMES
    ort_strict: bool = False  # True: a provider that cannot serve is an error, not a CPU fallback
    telemetry_period_s: float = 1.0
    max_payload_bytes: int = 16384
    max_train_per_task: int | None = 3000
    round_s: float = 60.0
    round_target_samples: int = 0
    drain_s: float = 5.0
    publish_every_s: float = 0.0  # > 0: serve the locally trained model every so often (no FL)
    model_dir: Path | None = None
    seed: int = 0
    round_channel: str | None = None  # 127.0.0.1:PORT: serve FL rounds (None: $DARTFL_ROUND_CHANNEL)
    deadline_admission: bool = True  # refuse at once a request that cannot make its SLO
    # Serve and train concurrently on a split of the cores when the profile has several
    # (the allocator picks the split); False: one lane, time-shared on every core.
    split_cores: bool = False
    mqtt_security: MqttSecurity | None = None  # TLS files and login for an mqtts:// broker_url
    # Which reply topics it answers on (docs/protocol.md): "any" only for old requesters.
    reply_topics: ReplyTopicRule = "requester"

    def __post_init__(self) -> None:
        if not self.device_id or "/" in self.device_id or "+" in self.device_id or "#" in self.device_id:
            raise ConfigError(f"device id must be non-empty without '/', '+', '#', got {self.device_id!r}")
        for name in ("slo_s", "period_s", "telemetry_period_s", "round_s", "width"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(f"{name.replace('_', '-')} must be > 0, got {value}")
        for name in ("round_target_samples", "publish_every_s", "drain_s", "seed"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"{name.replace('_', '-')} must be >= 0, got {value}")
        if self.queue_capacity < 1:
            raise ConfigError(f"queue capacity must be >= 1, got {self.queue_capacity}")
        if not self.tasks:
            raise ConfigError("the agent needs at least one task")
        if self.ort_provider not in ORT_PROVIDER_NAMES:
            raise ConfigError(
                f"ort-provider {self.ort_provider!r} is unknown; valid: {', '.join(ORT_PROVIDER_NAMES)}"
            )
        if self.reply_topics not in REPLY_TOPIC_RULES:
            raise ConfigError(f"reply-topics must be one of {REPLY_TOPIC_RULES}, got {self.reply_topics!r}")
        check_agent_policy(self.policy, self.loss_weighting)  # before the model is built

    @property
    def weighting(self) -> str:
        """The loss weighting in force: the explicit one, else the policy's natural one."""
        return self.loss_weighting or natural_loss_weighting(self.policy)

    def task_specs(self) -> list[TaskSpec]:
        """The tasks as the executor knows them: each with the SLO and the queue capacity."""
        return [TaskSpec(name, self.slo_s, self.queue_capacity) for name in self.tasks]

    def device_profile(self, profile: DeviceProfile) -> DeviceProfile:
        """The device the executor plans on: the whole of `profile` when the agent splits its
        cores (or the profile has one core, or a GPU that time sharing runs on); time-shared on
        a CPU profile of N cores, the cores its threads use, the larger of its two thread
        counts. Without this a one-thread agent on a 4-core profile planned its first steps
        at the 4-core speed, and the simulator, given the same profile, predicted the
        training of a device the agent did not run (docs/edge.md, "Threads")."""
        cores = profile.cores
        if cores.count == 1 or cores.has_gpu or (self.split_cores and cores.can_split):
            return profile
        return profile.with_cores(min(cores.count, max(self.inference_threads, self.training_threads)))

    def executor_config(self, profile: DeviceProfile) -> ExecutorConfig:
        """How the agent's executor runs on `profile`: two lanes when it splits the cores and the
        profile can, and a batch hold that, under load, serves batches of several."""
        model_s = max(profile.model_inference_for(task).per_request_s for task in self.tasks)
        return ExecutorConfig(
            self.period_s,
            max_decisions=DECISIONS_KEPT,
            deadline_admission=self.deadline_admission,
            admission_miss_target=ADMITTED_LATE,
            lanes=2 if self.split_cores and profile.cores.can_split else 1,
            concurrent_steps=False,
            batch_hold_s=batch_hold_s(self.slo_s, model_s, self.period_s),
        )
