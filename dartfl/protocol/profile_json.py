"""A device's cost profile as JSON: what an agent publishes in its status and telemetry
(dartfl.protocol.device), one function per direction. The reader raises ConfigError naming
the missing or mistyped field; the decoders turn it into a ProtocolError."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dartfl.errors import ConfigError
from dartfl.protocol.jsonwire import short
from dartfl.types import CoreModel, DeviceProfile, InferenceCost, RequestPathCost, TrainingCost

__all__ = ["profile_from_json", "profile_to_json"]


def profile_to_json(profile: DeviceProfile) -> dict[str, Any]:
    """The cost profile an agent publishes (its status message, its telemetry)."""
    return {
        "name": profile.name,
        "batch_fixed_s": profile.inference.batch_fixed_s,
        "per_request_s": profile.inference.per_request_s,
        "max_batch": profile.max_batch,
        "microbatch_fixed_s": profile.training.microbatch_fixed_s,
        "per_sample_s": profile.training.per_sample_s,
        "max_microbatch": profile.training.max_microbatch,
        "tasks": {
            name: {"batch_fixed_s": c.batch_fixed_s, "per_request_s": c.per_request_s}
            for name, c in profile.task_inference.items()
        },
        "description": profile.description,
        "request_path": {
            "receive_s": profile.request_path.receive_s,
            "ingress_s": profile.request_path.ingress_s,
            "egress_s": profile.request_path.egress_s,
            "per_batch_s": profile.request_path.per_batch_s,
        },
        **({"cores": _cores_to_json(profile.cores)} if profile.cores != CoreModel() else {}),
    }


def _cores_to_json(model: CoreModel) -> dict[str, Any]:
    cpu = model.gpu_inference_on_cpu
    return {
        "count": model.count,
        "inference_speedup": list(model.inference_speedup),
        "training_speedup": list(model.training_speedup),
        "inference_interference": model.inference_interference,
        "training_interference": model.training_interference,
        "switch_s": model.switch_s,
        "cpu_inference": None
        if cpu is None
        else {"batch_fixed_s": cpu.batch_fixed_s, "per_request_s": cpu.per_request_s},
    }


def _cores_from_json(obj: Any) -> CoreModel:
    if obj is None:
        return CoreModel()
    cpu = obj.get("cpu_inference")
    return CoreModel(
        count=obj["count"],
        inference_speedup=tuple(obj["inference_speedup"]),
        training_speedup=tuple(obj["training_speedup"]),
        inference_interference=obj["inference_interference"],
        training_interference=obj["training_interference"],
        switch_s=obj["switch_s"],
        gpu_inference_on_cpu=None
        if cpu is None
        else InferenceCost(cpu["batch_fixed_s"], cpu["per_request_s"]),
    )


def profile_from_json(obj: object) -> DeviceProfile:
    """`profile_to_json` read back; ConfigError naming what is missing or wrong."""
    if not isinstance(obj, Mapping):
        raise ConfigError(f"a cost profile must be a JSON object, got {short(obj)}")
    try:
        tasks = obj.get("tasks") or {}
        return DeviceProfile(
            name=str(obj["name"]),
            inference=InferenceCost(obj["batch_fixed_s"], obj["per_request_s"]),
            max_batch=obj["max_batch"],
            training=TrainingCost(obj["microbatch_fixed_s"], obj["per_sample_s"], obj["max_microbatch"]),
            task_inference={
                str(t): InferenceCost(c["batch_fixed_s"], c["per_request_s"]) for t, c in tasks.items()
            },
            description=str(obj.get("description") or ""),
            request_path=RequestPathCost(**(obj.get("request_path") or {})),
            cores=_cores_from_json(obj.get("cores")),
        )
    except (KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"a cost profile lacks or mistypes {exc}") from None
