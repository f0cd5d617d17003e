"""What a model costs on a GPU: decode, prefill, training and weight-sync times.

Every figure is derived from the model's size and one H100-class GPU (80 GB HBM at
3.35 TB/s, 989 dense bf16 TFLOP/s), with efficiencies stated next to each formula, so the
same code sizes a 7B and a 235B model. Weight-sync times are calibrated on the figures verl
publishes for its fully asynchronous trainer (see docs/datacenter.md).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from dartfl.errors import ConfigError

__all__ = ["MAX_SWITCH_S", "MODEL_SIZES", "ModelSpec", "model_spec", "weight_sync_range_s"]

GPU_MEM_B = 80e9
GPU_HBM_B_PER_S = 3.35e12
GPU_FLOP_PER_S = 989e12
HYBRID_MEM_SHARE = 0.5  # verl: gpu_memory_utilization of hybrid replicas "0.3-0.5"; its upper end
MEM_BW_EFFICIENCY = 0.7  # share of peak HBM bandwidth a decode step achieves
DECODE_OVERHEAD_S = 0.002  # kernel launches, sampling, scheduler: per decode step
TRAIN_MFU = 0.35  # model FLOP utilisation of an FSDP trainer on long sequences
PREFILL_MFU = 0.5
# The longest role switch a run may set (--switch-cost-s), seconds. Published switches take
# seconds (verl: 9.1 s to lend a replica, 3.3 s to take it back; the default here is 6-17 s):
# an hour is far beyond any of them, and a longer dead time only makes the simulator tick
# through it second by second (1e7 s ran for minutes, 1e300 s never ended).
MAX_SWITCH_S = 3600.0

# verl fully-async weight-sync times (s): low and high of the published range per model size.
SYNC_ANCHORS: tuple[tuple[float, float, float], ...] = (
    (7.6e9, 0.02, 0.12),
    (30.5e9, 4.4, 15.8),
    (235e9, 23.7, 58.6),
)

# name -> (total params, active params per token, KV-cache bytes per token)
MODEL_SIZES: dict[str, tuple[float, float, int]] = {
    "1.5b": (1.5e9, 1.5e9, 28 * 2 * 2 * 128 * 2),
    "7b": (7.6e9, 7.6e9, 28 * 4 * 2 * 128 * 2),  # Qwen2.5-7B: 28 layers, 4 KV heads
    "14b": (14.7e9, 14.7e9, 48 * 8 * 2 * 128 * 2),
    "32b": (32.5e9, 32.5e9, 64 * 8 * 2 * 128 * 2),
    "30b-a3b": (30.5e9, 3.3e9, 48 * 4 * 2 * 128 * 2),  # MoE, 3B active
    "70b": (70.6e9, 70.6e9, 80 * 8 * 2 * 128 * 2),
    "235b-a22b": (235e9, 22e9, 94 * 4 * 2 * 128 * 2),  # MoE, 22B active
}
ALIASES = {"30b": "30b-a3b", "235b": "235b-a22b"}


@dataclass(frozen=True)
class ModelSpec:
    """Costs of one model on the cluster's GPUs. Times in seconds, memory in tokens.

    A rollout engine spans `tp` GPUs (tensor parallel). Its decode step with `n` active
    sequences holding `kv` context tokens in all takes
    `decode_fixed_s + decode_per_seq_s * n + decode_per_kv_token_s * kv`.
    """

    name: str
    params: float
    active_params: float
    tp: int
    decode_fixed_s: float
    decode_per_seq_s: float
    decode_per_kv_token_s: float
    prefill_per_token_s: float
    kv_tokens_per_engine: int
    max_seqs_per_engine: int
    train_per_token_gpu_s: float  # one GPU's time per trained token (fwd+bwd+old logprobs)
    train_min_gpus: int
    minibatch_overhead_s: float  # optimizer step and gradient all-reduce, per minibatch
    sync_low_s: float
    sync_high_s: float
    switch_s: float  # dead time when a GPU changes role (load weights, build engine/optimizer)
    hybrid_kv_tokens_per_engine: int = 0  # KV of a trainer GPU lent to rollout (0: as a dedicated one)

    def __post_init__(self) -> None:
        if not (isinstance(self.tp, int) and self.tp >= 1):
            raise ConfigError(f"tensor-parallel size must be an integer >= 1, got {self.tp!r}")
        for name in ("decode_fixed_s", "decode_per_seq_s", "train_per_token_gpu_s", "switch_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"model {self.name}: {name} must be a finite number >= 0, got {value}")
        if self.switch_s > MAX_SWITCH_S:
            raise ConfigError(
                f"model {self.name}: switch_s must be <= {MAX_SWITCH_S:g} s, got {self.switch_s}"
            )
        if self.kv_tokens_per_engine < 1 or self.max_seqs_per_engine < 1:
            raise ConfigError(f"model {self.name}: the KV cache leaves no room for a sequence")

    def decode_step_s(self, seqs: float, kv_tokens: float) -> float:
        return self.decode_fixed_s + self.decode_per_seq_s * seqs + self.decode_per_kv_token_s * kv_tokens

    def engine_slots(self, context_tokens: float, *, hybrid: bool = False) -> int:
        """Sequences one engine holds at once: KV memory over the mean context, capped.

        `hybrid`: an engine on trainer GPUs lent to rollout, which shares the GPU with the
        sleeping training engine and gets less memory for KV (verl: 0.3-0.5 of the GPU).
        """
        kv = self.hybrid_kv_tokens_per_engine if hybrid and self.hybrid_kv_tokens_per_engine else None
        by_memory = int((kv or self.kv_tokens_per_engine) / max(1.0, context_tokens))
        return max(1, min(self.max_seqs_per_engine, by_memory))

    @property
    def sync_s(self) -> float:
        """Transfer time of one weight update (geometric mean of the published range)."""
        return math.sqrt(self.sync_low_s * self.sync_high_s)


def weight_sync_range_s(params: float) -> tuple[float, float]:
    """(low, high) weight-sync seconds, log-log interpolated between the verl anchors."""
    anchors = SYNC_ANCHORS
    if params <= anchors[0][0]:
        lo, hi = anchors[0][1], anchors[0][2]
        scale = params / anchors[0][0]
        return lo * scale, hi * scale
    for (p0, lo0, hi0), (p1, lo1, hi1) in itertools.pairwise(anchors):
        if params <= p1:
            f = math.log(params / p0) / math.log(p1 / p0)
            return lo0 * (lo1 / lo0) ** f, hi0 * (hi1 / hi0) ** f
    p_last, lo_last, hi_last = anchors[-1]
    scale = params / p_last
    return lo_last * scale, hi_last * scale


def model_spec(size: str, *, switch_s: float | None = None) -> ModelSpec:
    """The spec of a named size (7b, 32b, 235b, ...); errors list the valid names."""
    key = ALIASES.get(size.strip().lower(), size.strip().lower())
    if key not in MODEL_SIZES:
        valid = ", ".join([*MODEL_SIZES, *ALIASES])
        raise ConfigError(f"unknown model size {size!r}; valid: {valid}")
    params, active, kv_bytes = MODEL_SIZES[key]
    weights_b = 2.0 * params
    # 1. Tensor parallel: the smallest power of two that leaves 60% of memory for KV cache.
    tp = 1
    while weights_b / tp > 0.4 * GPU_MEM_B:
        tp *= 2
    bw = tp * GPU_HBM_B_PER_S * MEM_BW_EFFICIENCY
    # 2. Decode: read the weights once per step; compute per sequence; read each KV token.
    read_b = min(weights_b, 2.0 * active * 8) if active < params else weights_b  # MoE: hot experts
    fixed = read_b / bw + DECODE_OVERHEAD_S
    per_seq = 2.0 * active / (tp * GPU_FLOP_PER_S * 0.3)
    per_kv = kv_bytes / bw
    kv_tokens = int((tp * 0.9 * GPU_MEM_B - weights_b - tp * 4e9) / kv_bytes)
    hybrid_kv = int((tp * HYBRID_MEM_SHARE * GPU_MEM_B - weights_b - tp * 4e9) / kv_bytes)
    # 3. Training: 6N per token forward+backward, 2N more for the old policy's log-probs.
    train = 8.0 * active / (GPU_FLOP_PER_S * TRAIN_MFU)
    min_gpus = max(1, math.ceil(16.0 * params / (0.7 * GPU_MEM_B)))  # bf16 + fp32 Adam, sharded
    lo, hi = weight_sync_range_s(params)
    return ModelSpec(
        name=key,
        params=params,
        active_params=active,
        tp=tp,
        decode_fixed_s=fixed,
        decode_per_seq_s=per_seq,
        decode_per_kv_token_s=per_kv,
        prefill_per_token_s=2.0 * active / (tp * GPU_FLOP_PER_S * PREFILL_MFU),
        kv_tokens_per_engine=max(1, kv_tokens),
        max_seqs_per_engine=256,
        train_per_token_gpu_s=train,
        train_min_gpus=min_gpus,
        minibatch_overhead_s=0.2 + 16.0 * params / 400e9,  # fp32 gradient reduce at ~400 GB/s
        sync_low_s=lo,
        sync_high_s=hi,
        switch_s=switch_s if switch_s is not None else 5.0 + 2.0 * weights_b / 5e9 / tp,
        hybrid_kv_tokens_per_engine=max(1, hybrid_kv),
    )
