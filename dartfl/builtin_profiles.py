"""The built-in device profiles: documented estimates for DART-FL's reference model.

Estimates, not measurements: docs/profiles.md derives every number (reference model at width
multiplier 6) and cites the benchmarks behind each ratio. The costs are those of one core (on
the Jetson: of its GPU), today's one-core figures; the core models say how the whole device
scales them (docs/profiles.md, "Cores"). `x86-1core` stays one core, so that one-core time
sharing is always at hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from dartfl.types import CoreModel, DeviceProfile, InferenceCost, RequestPathCost, TrainingCost

__all__ = ["BUILTIN_PROFILES"]

_NO_TASKS: Mapping[str, InferenceCost] = MappingProxyType({})


# The request path measured on the reference x86 core (docs/profiles.md, "The request path"):
# receiving a QoS 1 request, decoding and admitting it (JSON), publishing its reply alone.
_X86_PATH_S = (58e-6, 22e-6, 57e-6)


def _path(dispatch_ratio: float) -> RequestPathCost:
    """The x86 request path scaled by a device's interpreter-bound speed ratio `Kd`."""
    receive, ingress, egress = (round(t * dispatch_ratio, 6) for t in _X86_PATH_S)
    return RequestPathCost(receive_s=receive, ingress_s=ingress, egress_s=egress)


def _amdahl(four_core_speedup: float, count: int) -> tuple[float, ...]:
    """Speedups on 1..count cores of an Amdahl fit through the measured 4-core speedup.

    docs/profiles.md: S(4) is the Geekbench 6 multi/single ratio (one task split over
    threads, as one work item on a lane of cores is); S(j) = 1 / ((1 - p) + p / j)."""
    p = (1.0 - 1.0 / four_core_speedup) / 0.75
    return tuple(round(1.0 / ((1.0 - p) + p / j), 3) for j in range(1, count + 1))


def _builtin(
    name: str,
    description: str,
    inference: tuple[float, float, int],
    training: tuple[float, float, int],
    request_path: RequestPathCost,
    cores: CoreModel,
) -> DeviceProfile:
    batch_fixed_s, per_request_s, max_batch = inference
    microbatch_fixed_s, per_sample_s, max_microbatch = training
    return DeviceProfile(
        name=name,
        inference=InferenceCost(batch_fixed_s=batch_fixed_s, per_request_s=per_request_s),
        max_batch=max_batch,
        training=TrainingCost(
            microbatch_fixed_s=microbatch_fixed_s, per_sample_s=per_sample_s, max_microbatch=max_microbatch
        ),
        task_inference=_NO_TASKS,
        description=description,
        request_path=request_path,
        cores=cores,
    )


# Geekbench 6 multi/single (docs/profiles.md [2]): Pi 4 653/289, Pi 5 2164/904.
_PI4_SPEEDUP = _amdahl(653 / 289, 4)
_PI5_SPEEDUP = _amdahl(2164 / 904, 4)
# The Jetson's A78AE cores are taken to scale as the Pi 5's A76 (no published ratio in [2]).
_ORIN_CPU_SPEEDUP = _amdahl(2164 / 904, 6)

# Tuples: (batch-fixed-s, per-request-s, max-batch), (microbatch-fixed-s, per-sample-s,
# max-microbatch); then the request path, scaled by the dispatch ratio Kd of each device.
BUILTIN_PROFILES: dict[str, DeviceProfile] = {
    p.name: p
    for p in (
        _builtin(
            "pi4",
            "Raspberry Pi 4 (4x Cortex-A72, 1.8 GHz); ONNX Runtime inference, PyTorch training; "
            "reference CNN at width 6. Estimate: x86 core figures scaled by public benchmark "
            "ratios, 4-core speedup from Geekbench 6 (docs/profiles.md). A full training "
            "microbatch takes ~0.75 s on one core, ~0.33 s on all four: past a 250 ms SLO slack.",
            (0.0010, 0.0050, 32),
            (0.012, 0.023, 32),
            _path(5.5),
            CoreModel(4, _PI4_SPEEDUP, _PI4_SPEEDUP, 0.15, 0.10, 0.005),
        ),
        _builtin(
            "pi5",
            "Raspberry Pi 5 (4x Cortex-A76, 2.4 GHz); ONNX Runtime inference, PyTorch training; "
            "reference CNN at width 6. Estimate: about 3x a Pi 4 on compute, 4-core speedup "
            "from Geekbench 6 (docs/profiles.md); a full training microbatch takes ~0.24 s on "
            "one core.",
            (0.00048, 0.0016, 32),
            (0.0060, 0.0073, 32),
            _path(2.4),
            CoreModel(4, _PI5_SPEEDUP, _PI5_SPEEDUP, 0.10, 0.08, 0.003),
        ),
        _builtin(
            "jetson-orin-nano",
            "NVIDIA Jetson Orin Nano 8GB: GPU (1024 CUDA cores) and 6x Cortex-A78AE; ONNX Runtime "
            "CUDA inference and PyTorch CUDA training, or, split, ONNX Runtime on CPU cores "
            "while the GPU trains; reference CNN at width 6. Estimate: fixed costs dominated by "
            "the host launching kernels, tiny per-item costs on the GPU (docs/profiles.md).",
            (0.00087, 0.00016, 64),
            (0.0080, 0.00058, 64),
            _path(3.8),
            CoreModel(
                6,
                _ORIN_CPU_SPEEDUP,
                (1.0,) * 6,
                0.10,
                0.05,
                0.005,
                gpu_inference_on_cpu=InferenceCost(0.00045, 0.0026),
            ),
        ),
        _builtin(
            "x86-1core",
            "One modern x86-64 core (AVX2/AVX-512), ONNX Runtime and PyTorch on one thread; "
            "reference CNN at width 6. Scaled from the measured width-1 ONNX Runtime figures "
            "in docs/profiles.md.",
            (0.00018, 0.00064, 32),
            (0.0022, 0.0029, 32),
            _path(1.0),
            CoreModel(),
        ),
    )
}
