"""The ``sft`` section: LLaMA-Factory's settings (``mtsql.engines.llamafactory``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from mtsql.base.config import (
    Batch,
    Devices,
    Items,
    Items0,
    Layers,
    Port,
    Positive,
    Range,
    Rank,
    Rounds,
    Tokens,
    operational,
    result,
)
from mtsql.base.provenance import cpu_has_fast_bf16
from mtsql.core.agent.settings import Policy


@dataclass(frozen=True)
class SftConfig:
    """LLaMA-Factory SFT (``mtsql.engines.llamafactory``)."""

    finetuning_type: Literal["lora", "full", "freeze"] = result(
        "lora"
    )  # freeze: only the last trainable_layers
    # train
    trainable_layers: Layers = result(
        0
    )  # freeze: how many of the model's last decoder layers train (the rest
    # stay fixed)
    lora_rank: Rank = result(8)
    lora_alpha: Rank = result(16)
    lora_target: str = result("all")  # LLaMA-Factory: all linear layers, or comma-separated module names
    cutoff_len: Tokens = result(4096)
    learning_rate: Positive = result(1e-4)
    lr_scheduler_type: str = result("cosine")
    warmup_ratio: Annotated[float, Range(0, 1, high_open=True)] = result(0.0)
    epochs: Annotated[float, Range(0, low_open=True, most=10_000)] = result(1.0)
    max_steps: Items | None = result(None)
    batch_size: Batch = result(1)  # per device: with grad_accum and the world size, the examples of one step
    grad_accum: Batch = result(4)
    rounds: Rounds = operational(3)  # how many rounds `sft-iterate` runs, not what one round produces
    first_round_policy: Policy = operational("model")  # the pipeline passes it to round 1's sample stage as
    # sample.policy, which that stage's fingerprint covers
    heldout: Items0 = result(32)  # eval turns scored after each round
    nnodes: Devices = result(1)  # the world size (nnodes x nproc_per_node) multiplies the examples of a step
    nproc_per_node: Devices = result(1)
    # this machine's rank when nnodes > 1 (override per node: sft.node_rank=1); every rank must compute the
    # same fingerprint, hence the same folder
    node_rank: Annotated[int, Range(0, most=1023)] = operational(0)
    master_addr: str = operational("127.0.0.1")
    master_port: Port = operational(29500)
    use_cpu: bool = result(True)
    bf16: bool | Literal["auto"] = result(
        False
    )  # bf16 autocast; auto: on GPUs, and on CPUs with AVX512-BF16 or
    # AMX (elsewhere bf16 is emulated and slower than float32)
    gradient_checkpointing: bool = operational(
        True
    )  # off: no activation recompute, more memory (fine for small
    # models); the same forward and backward math either way
    deepspeed: Literal["none", "z2", "z3", "z3_offload"] = result(
        "none"
    )  # DeepSpeed ZeRO stage (GPU, through
    # torchrun); its optimizer differs
    # from torch's
    extra: dict[str, Any] = result(
        default_factory=dict
    )  # more LLaMA-Factory YAML keys, merged into train.yaml
    extra_override: bool = operational(
        False
    )  # let sft.extra replace keys mtsql sets (else that is an error);
    # sft.extra, hashed, holds the values that win


def with_bf16_resolved(sft: SftConfig) -> SftConfig:
    """``sft.bf16: auto`` decided for this machine: on GPUs, and on CPUs that compute bf16 natively."""
    if sft.bf16 != "auto":
        return sft
    return dataclasses.replace(sft, bf16=not sft.use_cpu or cpu_has_fast_bf16())
