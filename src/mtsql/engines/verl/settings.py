"""verl's own settings: ``rl.verl`` in a config (registered in ``engines/rl_settings.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mtsql.base.config import Devices, operational, result


@dataclass(frozen=True)
class VerlSettings:
    """verl's ``main_ppo`` on Ray (GPUs, or the CPUs through engines/verl/cpu_platform.py)."""

    n_gpus_per_node: Devices = result(4)  # its workers shard the batch and seed their rollouts by this layout
    nnodes: Devices = result(1)
    ray_address: str | None = operational(None)  # a Ray cluster to join (None: start one for the stage)
    rollout_name: Literal["vllm", "sglang"] = result("vllm")
    rollout_tp: Devices = operational(
        1
    )  # tensor parallel size of the rollout server: the same model split over
    # GPUs
    extra: tuple[str, ...] = result(())  # more Hydra overrides for main_ppo, appended to the command
    extra_override: bool = operational(
        False
    )  # let rl.verl.extra replace overrides mtsql sets (else that is an
    # error); extra, hashed, holds the values that win
