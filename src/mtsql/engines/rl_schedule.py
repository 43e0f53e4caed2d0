"""How long a curriculum stage trains, and which of its models it keeps (both RL engines).

* ``stage_steps``: ``rl.steps_per_stage``, or with ``rl.epochs_per_stage`` that many passes over
  the stage's items, an epoch being ``items // rl.batch_size`` steps (at least 1): verl's
  dataloader drops the last partial batch, and MTSQL-R1's release ran ``total_epochs=60`` per stage.
* ``validation_turns``: what ``rl.val_every`` validates on: the eval split of every eval dataset,
  ``rl.val_limit`` dialogues each (picked as ``data.eval_pick``), as the release validated on dev.
* ``local_rollouts``: the local engine's rollout engine, for training and validation alike.
* ``LocalValidation``: the local engine's hook: every ``rl.val_every`` steps and at the last step,
  a greedy rollout of those turns scored with the configured reward; with ``rl.val_pick: best``
  it keeps the trainable weights of the best validated step and puts them back at the end.
* ``best_step``: the validated step with the highest mean reward (the first of equals).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from mtsql.core.data import eval_turns
from mtsql.core.results import TrainingStep
from mtsql.core.trajectories import scorer
from mtsql.engines.rl_engines import RolloutBounds
from mtsql.engines.rollout import RolloutEngine, derive_seed


def stage_steps(rl, items: int | None) -> int | None:
    """Optimizer steps of a stage of ``items`` questions (None: unknown, for epochs before the
    curriculum exists)."""
    if rl.epochs_per_stage is None:
        return rl.steps_per_stage
    if items is None:
        return None
    return rl.epochs_per_stage * max(1, items // rl.batch_size)


def validation_due(rl, step: int, last: int) -> bool:
    return rl.val_every > 0 and (step % rl.val_every == 0 or step == last)


def validation_turns(cfg) -> list:
    """The dev turns validated during RL (every eval dataset, ``rl.val_limit`` dialogues each)."""
    data = dataclasses.replace(cfg.data, eval_limit=cfg.rl.val_limit)
    return [turn for name in cfg.data.eval_datasets for turn in eval_turns(data, name, cfg.data_root)]


def best_step(steps: list[TrainingStep]) -> int | None:
    """The step of the highest ``val_reward_mean`` among ``steps`` that were validated (None when none
    was)."""
    scored = [(step.val_reward_mean, -step.step) for step in steps if step.val_reward_mean is not None]
    return -max(scored)[1] if scored else None


def local_rollouts(cfg, backend, *, temperature: float) -> RolloutEngine:
    """The local engine's rollouts with ``backend`` (the model it trains): at ``temperature`` over the whole
    distribution (top_p 1, as verl samples), each episode within ``rl_engines.RolloutBounds``; no ``sample``
    setting but the backend's own."""
    bounds = RolloutBounds.of(cfg.rl)
    return RolloutEngine.from_config(
        cfg,
        data_root=cfg.data_root,
        policy="model",
        temperature=temperature,
        top_p=1.0,
        max_new_tokens=bounds.message_cap(),
        max_response_tokens=bounds.response_tokens,
        backend=backend,
    )


class LocalValidation:
    """Validation inside the local engine's step loop (``after_step`` then ``finish``)."""

    def __init__(self, cfg, backend, *, stage: int, last_step: int):
        self.cfg, self.stage, self.last_step = cfg, stage, last_step
        self.turns = validation_turns(cfg)
        self.engine = local_rollouts(cfg, backend, temperature=0.0)
        self.best: tuple[float, int, dict] | None = None  # (mean reward, step, trainable weights)

    def after_step(self, step: int, model) -> dict:
        """The validation figures of ``step`` (empty when it is not due)."""
        if not validation_due(self.cfg.rl, step, self.last_step):
            return {}
        line = self.measure(step)
        if self.cfg.rl.val_pick == "best" and (self.best is None or line["val_reward_mean"] > self.best[0]):
            weights = {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}
            self.best = (line["val_reward_mean"], step, weights)
        return line

    def measure(self, step: int) -> dict:
        """Greedy rollout of the validation turns with the current weights, scored."""
        rows = self.engine.run(
            self.turns,
            n=1,
            seed=derive_seed(self.cfg.seed, "val", self.stage, step),
            progress=False,
            score=scorer(self.cfg, self.cfg.data_root),
        )
        return {
            "val_reward_mean": float(np.mean([r.reward["score"] for r in rows])),
            "val_ex": float(np.mean([r.execution or 0 for r in rows])),
            "val_em": float(np.mean([r.exact or 0 for r in rows])),
            "val_turns": len(rows),
        }

    def finish(self, model) -> int:
        """Put the picked step's weights into ``model``; returns that step."""
        if self.best is None or self.best[1] == self.last_step:
            return self.last_step
        params = dict(model.named_parameters())
        for name, value in self.best[2].items():
            params[name].data.copy_(value)
        return self.best[1]


def epochs_note(rl) -> str:
    """How the plan describes a stage's length."""
    if rl.epochs_per_stage is None:
        return f"{rl.steps_per_stage} steps"
    return f"{rl.epochs_per_stage} epochs of (items // {rl.batch_size}) steps, at least 1"
