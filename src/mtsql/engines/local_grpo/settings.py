"""The local GRPO engine's own settings: ``rl.local`` in a config (registered in
``engines/rl_settings.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mtsql.base.config import Layers, result


@dataclass(frozen=True)
class LocalSettings:
    """GRPO in this process (CPU or one GPU, no Ray)."""

    trainable_layers: Layers = result(
        0
    )  # only the last trainable_layers decoder layers train (0: every weight)
    rollout_backend: Literal["hf", "vllm"] = result(
        "hf"
    )  # vllm restarts a managed server on each step's weights
    # (sample.vllm settings)
