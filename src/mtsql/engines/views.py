"""The typed config views of the stages that generate with a model (``base.config.StageView``): what a
rollout reads, and the RL stage's view, which the RL engines take."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mtsql.base.config import StageView

if TYPE_CHECKING:  # annotations only: the sections' modules import more than a view needs
    from mtsql.core.agent.settings import EnvConfig, SqlConfig
    from mtsql.core.data.settings import DataConfig
    from mtsql.core.rewards import RewardConfig
    from mtsql.engines.backends.settings import SampleConfig
    from mtsql.engines.models.settings import ModelConfig
    from mtsql.engines.rl_settings import RlConfig


@dataclass(frozen=True)
class RolloutView(StageView):
    """What a rollout reads: the data, the SQL tool, the agent's environment, the reward, the model, the
    sampling and the seed (the sample stage's view)."""

    data: DataConfig
    sql: SqlConfig
    env: EnvConfig
    reward: RewardConfig
    model: ModelConfig
    sample: SampleConfig
    seed: int


@dataclass(frozen=True)
class RlView(RolloutView):
    """The rl stage's view: a rollout's and GRPO's settings (``rl``)."""

    rl: RlConfig
