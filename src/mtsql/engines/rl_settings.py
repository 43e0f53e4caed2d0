"""The ``rl`` section: GRPO's settings shared by every RL engine; ``rl.<engine>`` holds each engine's own
(``engines/*/settings.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from mtsql.base.config import (
    Batch,
    Engine,
    EngineOwned,
    Items,
    Items0,
    NonNegative,
    Positive,
    Range,
    Rank,
    Samples,
    Share,
    Tokens,
    operational,
    result,
)
from mtsql.engines.local_grpo.settings import LocalSettings
from mtsql.engines.verl.settings import VerlSettings

# The RL engines: one line each (its settings and its contract module, engines.rl_engines; the rl stage's code
# digest follows the module's name, so a change in an engine's code reruns its stages).
RL_ENGINES = {
    "local": Engine(LocalSettings, "mtsql.engines.local_grpo.engine"),
    "verl": Engine(VerlSettings, "mtsql.engines.verl.engine"),
}


@dataclass(frozen=True)
class RlConfig(EngineOwned):
    """GRPO (``mtsql.stages.rl``); ``rl.<engine>`` holds the engine's own settings."""

    SELECTOR = "engine"
    ENGINES = RL_ENGINES
    SELECTOR_EXTRA = ("auto",)

    engine: str = result(
        "auto"
    )  # a registered RL engine (verl, local: engines/*/settings.py); auto: verl where
    # CUDA is visible, else local (resolved before a stage runs)
    n: Samples = result(5)
    lr: Positive = result(1e-6)
    kl_coef: NonNegative = result(0.0)
    clip_ratio: Positive = result(0.2)
    steps_per_stage: Items = result(60)
    # curriculum by epochs: passes over a stage's items, each of items // batch_size steps, at least 1 (None:
    # steps_per_stage)
    epochs_per_stage: Annotated[int, Range(1, most=10_000)] | None = result(None)
    val_every: Items0 = result(
        0
    )  # validate on the dev sets (greedy, eval_datasets' eval split) every N steps and
    # at the last step of a stage (0: never; mtsql evaluate scores the models
    # afterwards); the validations are part of the stage's metrics
    val_limit: Items | None = result(None)  # dialogues per eval dataset in a validation (None: all)
    val_pick: Literal["last", "best"] = result(
        "last"
    )  # a stage's model: its last step's, or the best validated
    # one (highest mean reward; needs val_every)
    batch_size: Batch = result(256)  # questions per GRPO step (unlike sample.batch_size, this is the math)
    mini_batch_size: Batch = result(256)
    max_prompt_len: Tokens = result(4000)
    max_response_len: Tokens = result(8000)
    temperature: Positive = result(
        1.0
    )  # GRPO learns from the spread of a group's samples: greedy would have none
    lora_rank: Annotated[int, Range(0, most=2**16)] = result(0)  # 0 = full parameters
    lora_alpha: Rank = result(32)
    micro_batch_size_per_gpu: Batch = operational(1)  # actor update and log-prob micro-batches,
    # accumulated into the same step
    gpu_memory_utilization: Share = operational(
        0.5
    )  # share of GPU memory a rollout server may take (verl's, or
    # the local engine's vLLM rollouts)
    max_message_tokens: Tokens | None = result(
        None
    )  # cap per assistant message (None: the remaining response
    # budget)

    # each engine's settings, typed (an engine added to RL_ENGINES adds its property here)
    @property
    def local(self) -> LocalSettings:
        return self.owned["local"]

    @property
    def verl(self) -> VerlSettings:
        return self.owned["verl"]
