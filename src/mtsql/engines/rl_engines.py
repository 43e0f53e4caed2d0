"""The RL engines behind one contract, so that ``stages/rl.py`` knows none of them.

An engine has one line in ``RL_ENGINES`` (``engines/rl_settings.py``): its ``rl.<name>`` settings and its
contract module, which is an ``RlEngine`` (``tests/test_rl_contract.py`` holds every registered module to its
signatures):

* ``train_curriculum_stage``: train one curriculum stage on ``turns`` from ``base_model``, leave
  ``out_dir/model`` and one ``core.results.TrainingStep`` line per step in ``metrics_path``, log each step to
  ``trackers`` (``step_metrics``: the same names for every engine), return the stage's
  ``core.results.RlStageResult`` (``RlStageResult.of_steps``: the same figures for every engine);
* ``plan_curriculum_stage``: what it would run (``--dry-run``);
* ``identity``: what generates its rollouts beyond the config (the fingerprint covers it);
* ``sample_settings``: what its rollouts read of the ``sample`` section (the rl stage's fingerprint
  covers that and no other ``sample`` setting).

Both engines bound a rollout alike (``RolloutBounds``) and share ``groups_with_signal``. Each ``engine``
module imports torch, Ray or verl only inside ``train_curriculum_stage``.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, cast

from mtsql.base.errors import UsageError
from mtsql.base.trackers import Trackers
from mtsql.core.data.records import Turn
from mtsql.core.results import RlStageResult, TrainingStep
from mtsql.engines.rl_settings import RL_ENGINES, RlConfig
from mtsql.engines.views import RlView


class RlEngine(Protocol):
    """The contract module of an RL engine (its functions, without ``self``)."""

    def train_curriculum_stage(
        self,
        cfg: RlView,
        turns: list[Turn],
        *,
        base_model: str,
        out_dir: Path,
        metrics_path: Path,
        stage: int,
        trackers: Trackers,
    ) -> RlStageResult: ...

    def plan_curriculum_stage(
        self, cfg: RlView, *, base_model: str, out_dir: Path, stage: int, rows: int | None
    ) -> str: ...

    def identity(self, cfg: RlView) -> dict: ...

    def sample_settings(self, cfg: RlView) -> dict: ...


@dataclass(frozen=True)
class RolloutBounds:
    """What bounds one RL rollout, read alike by every engine: an episode's response, its assistant messages
    and the observations between them (``rl.max_response_len``: verl's ``data.max_response_length``), and one
    assistant message (``rl.max_message_tokens``; None: what the response has left)."""

    response_tokens: int
    message_tokens: int | None

    @classmethod
    def of(cls, rl: RlConfig) -> RolloutBounds:
        return cls(response_tokens=rl.max_response_len, message_tokens=rl.max_message_tokens)

    def message_cap(self) -> int:
        """The most one message may generate: its own cap, else the whole response's."""
        return self.message_tokens or self.response_tokens


def groups_with_signal(rewards: Iterable[tuple[object, float]]) -> float:
    """The share of groups (``(group, reward)`` per sample) whose rewards differ: a group of equal rewards has
    zero advantage and gives no policy gradient (0.0 when there is no sample)."""
    groups: dict[object, set[float]] = {}
    for group, reward in rewards:
        groups.setdefault(group, set()).add(reward)
    return sum(len(seen) > 1 for seen in groups.values()) / len(groups) if groups else 0.0


def pick_engine(name: str) -> str:
    """``auto``: verl where a CUDA device is visible, else the local engine."""
    if name != "auto":
        return name
    import torch  # only to look for a GPU

    return "verl" if torch.cuda.is_available() else "local"


def rl_engine(name: str) -> RlEngine:
    """The ``engine`` module of RL engine ``name`` (``auto`` must be resolved first: ``pick_engine``)."""
    if name not in RL_ENGINES:
        raise UsageError(
            f"rl.engine={name}: resolve it to one of {', '.join(RL_ENGINES)} before a stage runs"
        )
    return cast(RlEngine, importlib.import_module(RL_ENGINES[name].module))


def step_metrics(step: TrainingStep) -> dict:
    """One step as the dashboards show it, the same for every engine: ``rl/<field>`` for the fields of
    ``TrainingStep`` (reward, KL, grad norm, clip fraction, response length, ...) and what else the engine
    logged beside them at the top level (numbers only reach the trackers)."""
    return {f"rl/{name}": value for name, value in step.to_dict().items() if name not in ("stage", "step")}
